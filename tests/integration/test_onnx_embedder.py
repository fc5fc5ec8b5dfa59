"""The onnx embedder: MiniLM through ONNX Runtime, exported once from the weights the 'local'
extra installs, against the torch (sentence-transformers) embedder on the same sentences."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from memory_pipelines.config import ConfigError, load
from memory_pipelines.embed import EmbedConfig, build_embedder, embed_config
from tests.helpers import EMBEDDER_SENTENCES

pytest.importorskip("onnxruntime", reason="needs the 'local' extra (the CI test command installs it)")
pytest.importorskip("sentence_transformers", reason="needs the 'local' extra (the CI test command installs it)")

SENTENCES = [
    *EMBEDDER_SENTENCES,
    "the deploy failed again because the staging database ran out of disk; I moved the WAL to the bigger volume "
    "and restarted it, so retry the pipeline after lunch " * 12,  # past 256 word pieces: cut where torch cuts
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """Every precision exported once for the module (about 10 s)."""
    folder = tmp_path_factory.mktemp("embedders")
    for precision in ("fp32", "int8", "mixed"):
        build_embedder(EmbedConfig(backend="onnx", model="all-MiniLM-L6-v2", precision=precision,
                                   cache_dir=str(folder)))
    return folder


def onnx_embedder(cache, precision: str = "fp32"):
    return build_embedder(EmbedConfig(backend="onnx", model="all-MiniLM-L6-v2", precision=precision,
                                      cache_dir=str(cache)))


def test_its_vectors_agree_with_the_torch_embedders(cache):
    torch_vectors = build_embedder(EmbedConfig(backend="local", model="all-MiniLM-L6-v2")).embed(SENTENCES)
    fp32, int8, mixed = (onnx_embedder(cache, precision) for precision in ("fp32", "int8", "mixed"))
    fp32_cosines, int8_cosines, mixed_cosines = (np.einsum("ij,ij->i", embedder.embed(SENTENCES), torch_vectors)
                                                 for embedder in (fp32, int8, mixed))
    assert fp32_cosines.min() > 0.9999, fp32_cosines  # the same arithmetic in another runtime
    # measured 0.964 ("ok": the shortest text moves most) and 0.987 on average
    assert int8_cosines.min() > 0.95 and int8_cosines.mean() > 0.98, int8_cosines
    # the feed-forward outputs in fp32 bring every vector nearer torch's: measured 0.975 and 0.992 on average
    assert mixed_cosines.min() > 0.97 and (mixed_cosines > int8_cosines).all(), (mixed_cosines, int8_cosines)
    for embedder in (fp32, int8, mixed):
        vectors = embedder.embed(SENTENCES)
        assert vectors.shape == (len(SENTENCES), 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
        query, port, pandas = vectors[:3]
        assert query @ port > query @ pandas + 0.15


@pytest.mark.parametrize(("label", "integer_tensors"), [
    ("int8w7", 48),  # six layers: the attention's weights and three matrix products each, with zero points
    ("mixed8w7", 36),  # the same but each layer's feed-forward output (a weight and its zero points)
])
def test_its_int8_weights_are_7_bit_so_no_cpu_saturates_their_sums(cache, label, integer_tensors):
    """On a CPU without VNNI (AVX2 alone) ONNX Runtime adds pairs of (8-bit activation x 8-bit
    weight) products in 16 bits: at most 2 x 255 x 64 = 32,640 fits, 2 x 255 x 127 does not.
    8-bit weights gave such a CPU other vectors than this one (test_emulated_cpu shows it)."""
    import onnx
    from onnx import numpy_helper

    (path,) = cache.glob(f"*-{label}.onnx")
    model = onnx.load(str(path))
    integer_inputs = {name for node in model.graph.node if node.op_type in ("MatMulInteger", "QAttention")
                      for name in node.input}
    weights = [numpy_helper.to_array(t) for t in model.graph.initializer
               if t.name in integer_inputs and t.data_type == onnx.TensorProto.INT8 and t.dims]
    assert len(weights) == integer_tensors
    assert min(int(w.min()) for w in weights) >= -64 and max(int(w.max()) for w in weights) <= 64


def test_mixed_keeps_each_layers_feed_forward_output_in_fp32(cache):
    import onnx

    (path,) = cache.glob("*-mixed8w7.onnx")
    float_products = [node.name for node in onnx.load(str(path)).graph.node if node.op_type == "MatMul"]
    assert sorted(float_products) == [f"/model/encoder/layer.{n}/output/dense/MatMul" for n in range(6)]
    (int8,) = cache.glob("*-int8w7.onnx")
    assert not [node for node in onnx.load(str(int8)).graph.node if node.op_type == "MatMul"]


def test_mixed_refuses_a_model_without_feed_forward_outputs_by_bert_names(tmp_path, caplog):
    """Another architecture's export: mixed would quantize it whole under mixed's name."""
    import onnx
    from onnx import TensorProto, helper

    from memory_pipelines.embed.onnx_model import exported_model, weights_digest

    folder = tmp_path / "other-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    cache = tmp_path / "cache"
    cache.mkdir()
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="/blocks.0/mlp/fc2/MatMul")],
                              "other", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor("w", TensorProto.FLOAT, [2, 2], [1.0, 0.0, 0.0, 1.0])])
    onnx.save(helper.make_model(graph), str(cache / f"other-model-{weights_digest(folder)}-fp32.onnx"))
    with pytest.raises(ConfigError, match="MEMORY_EMBED_PRECISION=mixed .* has none by the names BERT exports: set "
                                          "MEMORY_EMBED_PRECISION to int8 or fp32$"):
        exported_model(folder, cache, "mixed")
    assert exported_model(folder, cache, "int8").name == f"other-model-{weights_digest(folder)}-int8w7.onnx"
    # ONNX Runtime's advice to pre-process the graph is not passed on to the user
    assert not [record for record in caplog.records if "pre-processing" in record.getMessage()]


def test_its_model_id_differs_from_the_torch_ones_and_by_precision(cache):
    assert onnx_embedder(cache, "fp32").model_id == "onnx:all-MiniLM-L6-v2:384"
    assert onnx_embedder(cache, "int8").model_id == "onnx:all-MiniLM-L6-v2-int8w7:384"
    assert onnx_embedder(cache, "mixed").model_id == "onnx:all-MiniLM-L6-v2-mixed8w7:384"
    assert onnx_embedder(cache).uses_every_core


def test_it_counts_tokens_as_the_torch_embedder_does(cache):
    torch_embedder = build_embedder(EmbedConfig(backend="local", model="all-MiniLM-L6-v2"))
    embedder = onnx_embedder(cache)
    for texts in (SENTENCES, SENTENCES[:1], ["word " * 1000]):
        assert embedder.count_tokens(texts) == torch_embedder.count_tokens(texts)
    assert embedder.count_tokens(["word " * 1000]) == 256 and embedder.count_tokens([]) == 0


def test_it_exports_once_and_a_later_process_reuses_the_file_without_torch(cache):
    files = {path.name: path.stat().st_mtime_ns for path in cache.iterdir()}
    # no temporary left
    assert sorted(name.rsplit("-", 1)[1] for name in files) == ["fp32.onnx", "int8w7.onnx", "mixed8w7.onnx"]
    code = ("import sys, json; from memory_pipelines.embed import EmbedConfig, build_embedder; "
            f"e = build_embedder(EmbedConfig(backend='onnx', cache_dir={str(cache)!r})); "
            "e.embed(['a sentence']); print(json.dumps(['torch' in sys.modules, 'transformers' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [False, False]
    onnx_embedder(cache)
    assert {path.name: path.stat().st_mtime_ns for path in cache.iterdir()} == files


def test_settings_reach_it_and_its_cache_is_under_the_home(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMORY_HOME", str(tmp_path))
    monkeypatch.setenv("MEMORY_EMBED_BACKEND", "onnx")
    assert embed_config(load()).precision == "mixed"  # the default
    monkeypatch.setenv("MEMORY_EMBED_PRECISION", "int8")
    config = embed_config(load())
    assert (config.backend, config.model, config.precision) == ("onnx", "all-MiniLM-L6-v2", "int8")
    assert config.batch_size == 64
    assert config.cache_dir == str(tmp_path / "embedders")


def test_a_model_folder_that_does_not_pool_by_the_mean_is_refused(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "modules.json").write_text(json.dumps([{"path": "1_Pooling",
                                                         "type": "sentence_transformers.models.Pooling"}]))
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    with pytest.raises(ConfigError, match="mean-pooling .* pools by pooling_mode_cls_token$"):
        build_embedder(EmbedConfig(backend="onnx", base_url=str(tmp_path), cache_dir=str(tmp_path / "cache")))
    assert not (tmp_path / "cache").exists()

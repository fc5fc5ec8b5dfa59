"""The model2vec embedder: a static model distilled once, offline, from the MiniLM weights the
'local' extra installs, then loaded by later processes without torch."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from memory_pipelines.config import ConfigError, load
from memory_pipelines.embed import EmbedConfig, build_embedder, embed_config
from tests.helpers import EMBEDDER_SENTENCES

pytest.importorskip("model2vec", reason="needs the 'local' extra (the CI test command installs it)")
pytest.importorskip("torch", reason="needs the 'local' extra (the CI test command installs it)")

SENTENCES = list(EMBEDDER_SENTENCES)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """Distilled once for the module (about a minute on 2 cores)."""
    folder = tmp_path_factory.mktemp("embedders")
    build_embedder(EmbedConfig(backend="model2vec", model="all-MiniLM-L6-v2", cache_dir=str(folder)))
    return folder


def m2v_embedder(cache):
    return build_embedder(EmbedConfig(backend="model2vec", model="all-MiniLM-L6-v2", cache_dir=str(cache)))


def test_it_distills_once_and_a_later_process_loads_it_without_torch(cache):
    entries = sorted(path.name for path in cache.iterdir())
    assert len(entries) == 1 and entries[0].endswith("-m2v256"), entries  # no temporary folder left
    model = cache / entries[0]
    files = {path.name: path.stat().st_mtime_ns for path in model.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(files)
    code = ("import sys, json; from memory_pipelines.embed import EmbedConfig, build_embedder; "
            "e = build_embedder(EmbedConfig(backend='model2vec', model='all-MiniLM-L6-v2', "
            f"cache_dir={str(cache)!r})); "
            f"v = e.embed({SENTENCES!r}); "
            "print(json.dumps([e.model_id, 'torch' in sys.modules, 'transformers' in sys.modules, v.tolist()]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    model_id, torch_loaded, transformers_loaded, vectors = json.loads(done.stdout.splitlines()[-1])
    assert (model_id, torch_loaded, transformers_loaded) == ("model2vec:all-MiniLM-L6-v2:256", False, False)
    # the same vectors in another process, to the last bit
    assert np.array_equal(np.array(vectors), m2v_embedder(cache).embed(SENTENCES))
    assert sorted(path.name for path in cache.iterdir()) == entries
    assert {path.name: path.stat().st_mtime_ns for path in model.iterdir()} == files


def test_its_model_id_and_dimension_are_its_own(cache):
    embedder = m2v_embedder(cache)
    assert embedder.model_id == "model2vec:all-MiniLM-L6-v2:256" and embedder.dimension == 256
    vectors = embedder.embed(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 256) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert not embedder.uses_every_core  # numpy on one thread: the stage's writes may overlap it


def test_its_vectors_are_deterministic_and_in_the_order_given(cache):
    embedder = m2v_embedder(cache)
    first = embedder.embed(SENTENCES)
    assert np.array_equal(first, embedder.embed(SENTENCES))
    assert np.array_equal(first[::-1], embedder.embed(SENTENCES[::-1]))


def test_similar_texts_are_closer_than_unrelated_ones(cache):
    embedder = m2v_embedder(cache)
    query, port, pandas, _ = embedder.embed(SENTENCES)
    assert query @ port > query @ pandas + 0.1
    a, b, c = embedder.embed(["the database ran out of disk space", "postgres has no free storage left",
                              "my cat likes to sleep in the sun"])
    assert a @ b > a @ c + 0.1 and a @ b > b @ c + 0.1


def test_it_counts_word_pieces_cut_where_it_reads(cache):
    embedder = m2v_embedder(cache)
    assert embedder.count_tokens(["word " * 1000]) == 512
    assert embedder.count_tokens(["ok"]) == 1 and embedder.count_tokens([]) == 0


def test_settings_reach_it_and_its_cache_is_under_the_home(monkeypatch, tmp_path):
    monkeypatch.setenv("MEMORY_HOME", str(tmp_path))
    monkeypatch.setenv("MEMORY_EMBED_BACKEND", "model2vec")
    monkeypatch.setenv("MEMORY_EMBED_DIM", "128")
    config = embed_config(load())
    assert (config.backend, config.model, config.dimension) == ("model2vec", "all-MiniLM-L6-v2", 128)
    assert config.batch_size == 64
    assert config.cache_dir == str(tmp_path / "embedders")


def test_more_dimensions_than_the_model_has_are_refused_before_distilling(tmp_path):
    with pytest.raises(ConfigError, match="MEMORY_EMBED_DIM=512 is more than the 384 dimensions"):
        build_embedder(EmbedConfig(backend="model2vec", dimension=512, cache_dir=str(tmp_path / "cache")))
    assert not (tmp_path / "cache").exists()

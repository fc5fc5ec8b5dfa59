"""A sentence-transformers folder (mean pooling: all-MiniLM-L6-v2 and its kind) run through
ONNX Runtime: the encoder and its mean pooling exported once from the folder's own weights
(torch, offline) into a cache file, int8-quantized from that on request (whole, or but for
the feed-forward outputs: `mixed`), and reused by every later process, which then needs
neither torch nor transformers."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

import numpy as np

from memory_pipelines.config import LOCAL_EXTRA, ConfigError

OPSET = 17
INPUTS = ("input_ids", "attention_mask")
# part of every cache file's name: a change to how the file is made must not reuse an old one
EXPORT_VERSION = f"opset{OPSET}-mean-fused1"
# A precision's name in its cache file and in its vectors' model id. int8's weights are 7-bit
# (reduce_range): a CPU without VNNI (AVX2 alone: Zen 2 and 3, Haswell to Skylake) multiplies
# 8-bit pairs into 16-bit sums, which saturate, so the 8-bit weights of before gave it other
# vectors than a CPU with VNNI (cosine 0.991 on average, 0.963 at worst, under one model id);
# with 7-bit weights no sum saturates and every CPU computes the same vectors. mixed is int8
# but for the feed-forward outputs (FEED_FORWARD_OUTPUT), kept in fp32.
PRECISION_LABELS = {"fp32": "fp32", "int8": "int8w7", "mixed": "mixed8w7"}
# The matrix product each layer's feed-forward block ends with (BERT's and its kind's names in
# torch's export). Quantized, it cost the most recall: in fp32 the search's recall equals
# fp32 MiniLM's within 1,440 and 7,200 characters, at about 1.3x its rate (docs/benchmarks.md).
FEED_FORWARD_OUTPUT = re.compile(r"/encoder/layer\.\d+/output/dense/MatMul")


def folder_json(folder: Path, name: str) -> dict:
    path = folder / name
    return json.loads(path.read_text()) if path.is_file() else {}


def check_mean_pooling(folder: Path) -> None:
    """The exported graph pools by the mean of the tokens, as MiniLM does: refuse a folder that pools otherwise."""
    modules = folder_json(folder, "modules.json")
    pooling = next((m["path"] for m in modules if isinstance(m, dict) and m.get("type", "").endswith(".Pooling")),
                   None) if isinstance(modules, list) else None
    modes = {key for key, on in folder_json(folder / pooling, "config.json").items()
             if key.startswith("pooling_mode_") and on} if pooling else set()
    if modes != {"pooling_mode_mean_tokens"}:
        raise ConfigError(f"the onnx embedder runs mean-pooling sentence-transformers models; {folder} pools by "
                          f"{', '.join(sorted(modes)) or 'nothing it declares'}")


def max_seq_length(folder: Path) -> int:
    """The longest input, as sentence-transformers cuts it (256 for MiniLM; its tokenizer.json says 128)."""
    declared = folder_json(folder, "sentence_bert_config.json").get("max_seq_length")
    return int(declared or folder_json(folder, "config.json").get("max_position_embeddings", 512))


def weights_digest(folder: Path, version: str = EXPORT_VERSION) -> str:
    """The folder's model as content, with how its file is made (`version`): another model,
    other weights or other settings get another cache file."""
    digest = hashlib.sha256(version.encode())
    files = sorted([folder / "config.json", *folder.glob("*.safetensors"), *folder.glob("*.bin")])
    if not any(path.suffix in (".safetensors", ".bin") for path in files):
        raise ConfigError(f"no model weights (*.safetensors, *.bin) in {folder}")
    for path in files:
        with path.open("rb") as handle:
            digest.update(hashlib.file_digest(handle, "sha256").digest())
    return digest.hexdigest()[:16]


def _written_atomically(target: Path, write: Callable[[Path], None]) -> Path:
    """`write` into a temporary file beside `target`, then renamed: a reader never sees half a
    model, and two processes exporting at once each rename a whole one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=".tmp")
    os.close(handle)
    try:
        write(Path(temporary))
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would keep the model from another user of the same home
        os.replace(temporary, target)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return target


def _export_fp32(folder: Path, target: Path) -> None:
    try:
        import onnx  # noqa: F401 - torch's exporter writes the file through it
        import torch
        from transformers import AutoModel
    except ImportError:
        raise ConfigError("exporting the onnx embedder's model needs torch, transformers and onnx, in the 'local' "
                          f"extra: {LOCAL_EXTRA}") from None
    from onnxruntime.transformers.optimizer import optimize_model

    class MeanPooled(torch.nn.Module):
        """Positional inputs (transformers 5 models take keywords), mean pooling over the mask
        inside the graph, as sentence-transformers pools; the embedder normalizes."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            tokens = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            return (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    # eager attention exports as plain matrix products, which the optimizer below fuses into
    # ONNX Runtime's Attention kernels (sdpa's export is not fused: 15-20% slower)
    model = MeanPooled(AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval())
    example = (torch.ones((2, 8), dtype=torch.long), torch.ones((2, 8), dtype=torch.long))
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        exported = Path(work) / "exported.onnx"
        # the tracer warns of shapes taken as constants: the padding check in transformers'
        # masks, false for every shape here (the vectors match torch's at any batch and length)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, example, str(exported), input_names=list(INPUTS),
                              output_names=["sentence_embedding"], opset_version=OPSET, dynamo=False,
                              dynamic_axes={**{name: {0: "batch", 1: "tokens"} for name in INPUTS},
                                            "sentence_embedding": {0: "batch"}})
        shape = folder_json(folder, "config.json")
        optimize_model(str(exported), model_type="bert", num_heads=shape.get("num_attention_heads", 0),
                       hidden_size=shape.get("hidden_size", 0)).save_model_to_file(str(target))


def feed_forward_outputs(model: Path) -> list[str]:
    """The names of the graph's feed-forward output products (FEED_FORWARD_OUTPUT)."""
    import onnx

    return [node.name for node in onnx.load(str(model), load_external_data=False).graph.node
            if node.op_type == "MatMul" and FEED_FORWARD_OUTPUT.search(node.name)]


class _WithoutPreProcessingAdvice(logging.Filter):
    """quantize_dynamic warns, on the root logger, that a graph not tagged as pre-processed
    should be; the exported graph was optimized by ONNX Runtime's own optimizer, and the advice
    would otherwise greet every user's first run of the default embedder."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.module == "quantize" and record.getMessage().startswith("Please consider to run "
                                                                                   "pre-processing"))


def _quantize_int8(source: Path, target: Path, keep: list[str]) -> None:
    """`source` quantized to int8 but for the nodes named in `keep`."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    advice = _WithoutPreProcessingAdvice()
    logging.getLogger().addFilter(advice)
    try:
        # per channel: one scale per output column (per tensor lost too much: cosine 0.947 to
        # the fp32 vectors); 7-bit weights (PRECISION_LABELS says why); the fused kernels'
        # outputs have no inferred type, so float is said
        quantize_dynamic(str(source), str(target), per_channel=True, reduce_range=True, weight_type=QuantType.QInt8,
                         nodes_to_exclude=keep, extra_options={"DefaultTensorType": TensorProto.FLOAT})
    finally:
        logging.getLogger().removeFilter(advice)


def exported_model(folder: Path, cache: Path, precision: str) -> Path:
    """The ONNX file of `folder`'s model at `precision` in `cache`, made on first use
    (a few seconds) and reused after."""
    target = cache / f"{folder.name}-{weights_digest(folder)}-{PRECISION_LABELS[precision]}.onnx"
    if target.is_file():
        return target
    if precision == "fp32":
        return _written_atomically(target, lambda path: _export_fp32(folder, path))
    fp32 = exported_model(folder, cache, "fp32")
    keep = feed_forward_outputs(fp32) if precision == "mixed" else []
    if precision == "mixed" and not keep:
        raise ConfigError(f"MEMORY_EMBED_PRECISION=mixed keeps each layer's feed-forward output in fp32, and the "
                          f"model in {folder} has none by the names BERT exports: set MEMORY_EMBED_PRECISION to "
                          "int8 or fp32")
    return _written_atomically(target, lambda path: _quantize_int8(fp32, path, keep))


@lru_cache(maxsize=2)
def load_session(path: str, threads: int):
    """One ONNX Runtime session per model file and process: every run and search in it reuse it."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # the encoder's matrix products spread over the cores this process may use; one graph
    # branch at a time (the graph is a chain) so no second pool competes for them
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


@lru_cache(maxsize=2)
def load_tokenizer(folder: str, max_length: int):
    """The folder's own fast tokenizer, cut at the model's longest input and padded to a batch's longest text."""
    from tokenizers import Tokenizer

    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(f"the onnx embedder reads a model folder's tokenizer.json; {folder} has none")
    tokenizer = Tokenizer.from_file(str(path))
    padding = tokenizer.padding or {}
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=padding.get("pad_id", 0), pad_token=padding.get("pad_token", "[PAD]"))
    return tokenizer


def encoded(tokenizer, texts: list[str]) -> dict[str, np.ndarray]:
    """The model's inputs for `texts`, padded to the longest."""
    encodings = tokenizer.encode_batch(texts)
    return {"input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64)}

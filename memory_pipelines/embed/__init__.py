"""Embedders: one interface (`Embedder`), swappable implementations, configured apart
from the chat model (`MEMORY_EMBED_*`)."""

from memory_pipelines.embed.embedders import (
    EmbedConfig, Embedder, EmbeddingError, HashingEmbedder, build_embedder, embed_config,
)

__all__ = ["EmbedConfig", "Embedder", "EmbeddingError", "HashingEmbedder", "build_embedder", "embed_config"]

"""Embedders: one interface (`Embedder`), swappable implementations, configured apart
from the chat model (`MEMORY_EMBED_*`)."""

from memory_pipelines.embed.embedders import (
    EmbedConfig, Embedder, EmbeddingError, HashingEmbedder, build_embedder, default_embedder_note, embed_config,
)

__all__ = ["EmbedConfig", "Embedder", "EmbeddingError", "HashingEmbedder", "build_embedder", "default_embedder_note",
           "embed_config"]

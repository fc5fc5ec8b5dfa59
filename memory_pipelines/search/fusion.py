"""Rankings fused into one: reciprocal rank fusion."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from memory_pipelines.search.hits import MemoryHit


def fuse_rrf(rankings: Sequence[Sequence[MemoryHit]], k: int = 60) -> list[MemoryHit]:
    """Reciprocal rank fusion (as navra's knowledge_search): score = sum of 1 / (k + rank).
    A hit found by both rankings keeps its similarity and its matched terms."""
    scores: dict[int, float] = {}
    merged: dict[int, MemoryHit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (k + rank)
            seen = merged.get(hit.id)
            merged[hit.id] = hit if seen is None else replace(
                seen, similarity=seen.similarity if seen.similarity is not None else hit.similarity,
                matched_terms=seen.matched_terms if seen.matched_terms is not None else hit.matched_terms)
    return [replace(merged[i], score=scores[i]) for i in sorted(scores, key=lambda i: (-scores[i], i))]

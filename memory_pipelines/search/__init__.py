"""Unified memory search: one read path over facts, raw chunks (and the whole message
archive), sketches — the navi design, served from the materialized tables.

Every search is scoped to one user; reading across users needs `admin=True`.

Modules: `hits` (hits and what a search served), `terms` (the query as terms and tsquery),
`base` (scoping, the query vector, statements in one round trip), a module per store
(`facts`, `chunks`, `passages`, `archive`, `sketches` with sketch writes, `entries` (knowledge entries) with
the error memory), `fusion` (reciprocal rank fusion), `freshness` (outdated excerpts),
`unified` (`MemorySearch` and `UnifiedMemorySearch`: every store in tiers within a budget),
`render` (the tool output), `decay` (decay-scored turns), `auto_recall` (automatic recall and
its ledger).
"""

from memory_pipelines.search.auto_recall import recall
from memory_pipelines.search.base import AccessDenied
from memory_pipelines.search.decay import get_turns_by_score
from memory_pipelines.search.freshness import outdated_by
from memory_pipelines.search.fusion import fuse_rrf
from memory_pipelines.search.hits import MemoryHit, passage_hit
from memory_pipelines.search.render import format_hits, format_served
from memory_pipelines.search.sketches import write_sketch
from memory_pipelines.search.terms import query_terms
from memory_pipelines.search.unified import SEARCH_MODES, MemorySearch, UnifiedMemorySearch

__all__ = [
    "SEARCH_MODES", "AccessDenied", "MemoryHit", "MemorySearch", "UnifiedMemorySearch", "format_hits",
    "format_served", "fuse_rrf", "get_turns_by_score", "outdated_by", "passage_hit", "query_terms", "recall",
    "write_sketch",
]

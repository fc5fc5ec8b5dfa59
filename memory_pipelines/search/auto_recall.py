"""Automatic recall for the next turn, with the ledger of excerpts a session was given."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from memory_pipelines.db import search as search_db
from memory_pipelines.embed import Embedder
from memory_pipelines.search.hits import MemoryHit
from memory_pipelines.search.unified import UnifiedMemorySearch

RECALL_MIN_SIMILARITY = 0.55
RECALL_MIN_TERMS = 2
RECALL_LEDGER_SIZE = 100


def recall(conn: psycopg.Connection, embedder: Embedder | None, session_id: str, recent_messages: Sequence[dict],
           incoming: str, k: int = 2) -> list[MemoryHit]:
    """Automatic recall: up to `k` raw excerpts for the next turn, only once the session has
    a summary. The query is the last four user/assistant messages plus the incoming one;
    hits below 0.55 similarity (or 2 matched terms on the text path), superseded ones and
    those already delivered to this session (the last 100) are dropped."""
    if not search_db.session_summary_exists(conn, session_id):
        return []
    owner = search_db.session_owner(conn, session_id)
    if owner is None:
        return []
    turns = [m["content"] for m in recent_messages if m.get("role") in ("user", "assistant")][-4:]
    text = "\n".join([*turns, incoming])
    search = UnifiedMemorySearch(conn, embedder)
    delivered = search_db.recall_delivered(conn, session_id)
    candidates = search.mark_freshness(search.search_chunks(text, owner, limit=k * 5), owner)
    picked = [h for h in candidates
              if h.superseded_by is None and h.id not in delivered
              and ((h.similarity or 0) >= RECALL_MIN_SIMILARITY or (h.matched_terms or 0) >= RECALL_MIN_TERMS)][:k]
    search_db.record_recall(conn, session_id, [hit.id for hit in picked], RECALL_LEDGER_SIZE)
    return [search.matching_window(hit, text) for hit in picked]

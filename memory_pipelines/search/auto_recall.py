"""Automatic recall for the next turn, with the ledger of excerpts a session was given."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from memory_pipelines.db.queries import query
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
    if not conn.execute(query("session_summary_exists"), {"session_id": session_id}).fetchone()[0]:
        return []
    owner = conn.execute(query("session_owner"), {"session_id": session_id}).fetchone()
    if owner is None:
        return []
    turns = [m["content"] for m in recent_messages if m.get("role") in ("user", "assistant")][-4:]
    text = "\n".join([*turns, incoming])
    search = UnifiedMemorySearch(conn, embedder)
    delivered = {r[0] for r in conn.execute(query("recall_delivered"), {"session_id": session_id})}
    candidates = search.mark_freshness(search.search_chunks(text, owner[0], limit=k * 5), owner[0])
    picked = [h for h in candidates
              if h.superseded_by is None and h.id not in delivered
              and ((h.similarity or 0) >= RECALL_MIN_SIMILARITY or (h.matched_terms or 0) >= RECALL_MIN_TERMS)][:k]
    for hit in picked:
        conn.execute(query("record_recall"), {"session_id": session_id, "chunk_id": hit.id})
    conn.execute(query("trim_recall_ledger"), {"session_id": session_id, "keep": RECALL_LEDGER_SIZE})
    return [search.matching_window(hit, text) for hit in picked]

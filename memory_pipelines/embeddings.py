"""Embedding what was materialized: every visible fact and every chunk whose embedding is
missing or from another model, in batches. No vector index: every search is scoped to one
user, where an exact scan of that user's rows is exact and faster than HNSW (migration 0010)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from memory_pipelines.db.queries import query
from memory_pipelines.embed import Embedder

# table -> the named query that lists its rows needing an embedding (id, text)
EMBEDDED_TABLES = {"memory_facts": "facts_needing_embedding", "memory_chunks": "chunks_needing_embedding",
                   "knowledge_entries": "entries_needing_embedding", "memory_turns": "turns_needing_embedding"}
PAGE_ROWS = 512


@dataclass
class EmbeddingReport:
    # table -> ids of the rows embedded (every table of EMBEDDED_TABLES, possibly empty)
    embedded_ids: dict[str, list[int]] = field(default_factory=lambda: {table: [] for table in EMBEDDED_TABLES})
    # table -> how many of them replaced a vector of another model (the embedder changed)
    replaced: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EMBEDDED_TABLES, 0))


def _store(conn: psycopg.Connection, table: str, ids: list[int], vectors: list[list[float]], model_id: str) -> None:
    conn.execute(query("create_embedding_load"))
    with conn.cursor().copy(query("copy_embedding_load")) as copy:
        copy.set_types(["int8", "vector"])
        for row_id, vector in zip(ids, vectors):
            copy.write_row((row_id, np.asarray(vector, dtype=np.float32)))
    conn.execute(sql.SQL(query("apply_embedding_load")).format(table=sql.Identifier(table)), {"model": model_id})


def embed_missing(pool: ConnectionPool, embedder: Embedder, page_rows: int = PAGE_ROWS) -> EmbeddingReport:
    """Embed what is missing or stale, page by page (each page its own transaction, so an
    interrupted run keeps what it finished); safe to run again."""
    report = EmbeddingReport()
    for table, listing in EMBEDDED_TABLES.items():
        after = 0
        while True:
            with pool.connection() as conn:
                rows = conn.execute(query(listing), {"model": embedder.model_id, "after": after,
                                                     "limit": page_rows}).fetchall()
            if not rows:
                break
            vectors = embedder.embed([text for _, text, _ in rows])
            with pool.connection() as conn, conn.transaction():
                _store(conn, table, [row_id for row_id, _, _ in rows], vectors, embedder.model_id)
            report.embedded_ids[table].extend(row_id for row_id, _, _ in rows)
            report.replaced[table] += sum(1 for _, _, stale in rows if stale)
            after = rows[-1][0]
    return report

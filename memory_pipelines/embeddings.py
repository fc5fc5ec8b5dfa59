"""Embedding what was materialized: every visible fact and every chunk whose embedding is
missing or from another model, in batches; then one HNSW index per table and model, built
after the load."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool

from memory_pipelines.db.queries import query
from memory_pipelines.embed import Embedder

# table -> the named query that lists its rows needing an embedding (id, text)
EMBEDDED_TABLES = {"memory_facts": "facts_needing_embedding", "memory_chunks": "chunks_needing_embedding",
                   "knowledge_entries": "entries_needing_embedding"}
PAGE_ROWS = 512


@dataclass
class EmbeddingReport:
    # table -> ids of the rows embedded (every table of EMBEDDED_TABLES, possibly empty)
    embedded_ids: dict[str, list[int]] = field(default_factory=lambda: {table: [] for table in EMBEDDED_TABLES})
    indexes_built: list[str] = field(default_factory=list)
    indexes_dropped: list[str] = field(default_factory=list)


def index_name(table: str, model_id: str) -> str:
    return f"{table}_hnsw_{hashlib.sha256(model_id.encode()).hexdigest()[:10]}"


def _store(conn: psycopg.Connection, table: str, ids: list[int], vectors: list[list[float]], model_id: str) -> None:
    conn.execute(query("create_embedding_load"))
    with conn.cursor().copy(query("copy_embedding_load")) as copy:
        copy.set_types(["int8", "vector"])
        for row_id, vector in zip(ids, vectors):
            copy.write_row((row_id, np.asarray(vector, dtype=np.float32)))
    conn.execute(sql.SQL(query("apply_embedding_load")).format(table=sql.Identifier(table)), {"model": model_id})


def _ensure_index(conn: psycopg.Connection, table: str, embedder: Embedder, report: EmbeddingReport) -> None:
    """The current model's HNSW index; indexes of models no row uses any more are dropped."""
    wanted = index_name(table, embedder.model_id)
    existing = {r[0] for r in conn.execute(query("embedding_indexes"),
                                           {"table": table, "prefix": f"{table}_hnsw_%"})}
    if wanted not in existing:
        conn.execute(sql.SQL(query("create_hnsw_index")).format(
            index=sql.Identifier(wanted), table=sql.Identifier(table),
            dimension=sql.Literal(embedder.dimension), model=sql.Literal(embedder.model_id)))
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
        report.indexes_built.append(wanted)
    models = {r[0] for r in conn.execute(sql.SQL(query("embedding_counts")).format(table=sql.Identifier(table)))}
    for name in sorted(existing - {wanted} - {index_name(table, m) for m in models if m}):
        conn.execute(sql.SQL(query("drop_index")).format(index=sql.Identifier(name)))
        report.indexes_dropped.append(name)


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
            vectors = embedder.embed([text for _, text in rows])
            with pool.connection() as conn, conn.transaction():
                _store(conn, table, [row_id for row_id, _ in rows], vectors, embedder.model_id)
            report.embedded_ids[table].extend(row_id for row_id, _ in rows)
            after = rows[-1][0]
        with pool.connection() as conn, conn.transaction():
            _ensure_index(conn, table, embedder, report)
    return report

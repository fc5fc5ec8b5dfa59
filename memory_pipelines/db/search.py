"""The reads and writes of `sql/queries/search.sql`."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from memory_pipelines.db import turns as turns_db
from memory_pipelines.db.queries import query
from memory_pipelines.shards import Shard


def search_rows(conn: psycopg.Connection, name: str, params: dict) -> list[dict]:
    """The rows of one of search's named statements, as dicts."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query(name), params).fetchall()


def pipelined_rows(conn: psycopg.Connection, statements: Sequence[tuple[str, dict]]) -> list[list[dict]]:
    """Named statements (name, params) sent together in one pipeline, each one's rows as dicts, in order."""
    with conn.pipeline():
        cursors = [conn.cursor(row_factory=dict_row).execute(query(name), params) for name, params in statements]
    return [cur.fetchall() for cur in cursors]


def other_embedding_models(conn: psycopg.Connection, scope: dict, model: str) -> tuple[str, ...]:
    """The models other than `model` the scope's served vectors were made with (none: all are its)."""
    return tuple(r[0] for r in conn.execute(query("other_embedding_models"), {**scope, "model": model}))


def count_access(conn: psycopg.Connection, fact_ids: Sequence[int], knowledge_ids: Sequence[int],
                 turn_ids: Sequence[int]) -> None:
    """Count an access on these facts, knowledge entries and turns, in one round trip (none: nothing sent)."""
    statements = [(name, {"ids": ids}) for name, ids in (("count_fact_access", fact_ids),
                                                          ("count_knowledge_access", knowledge_ids)) if ids]
    if statements or turn_ids:
        with conn.pipeline():  # one round trip
            for name, params in statements:
                conn.execute(query(name), params)
            if turn_ids:
                turns_db.count_turn_access(conn, turn_ids)


def session_summary_exists(conn: psycopg.Connection, session_id: str) -> bool:
    """Whether the session has a (non-empty) summary."""
    return conn.execute(query("session_summary_exists"), {"session_id": session_id}).fetchone()[0]


def session_owner(conn: psycopg.Connection, session_id: str) -> str | None:
    """The user the session belongs to (None: no such session)."""
    owner = conn.execute(query("session_owner"), {"session_id": session_id}).fetchone()
    return owner[0] if owner is not None else None


def recall_delivered(conn: psycopg.Connection, session_id: str) -> set[int]:
    """The chunks automatic recall already gave the session (its ledger)."""
    return {r[0] for r in conn.execute(query("recall_delivered"), {"session_id": session_id})}


def record_recall(conn: psycopg.Connection, session_id: str, chunk_ids: Sequence[int], keep: int) -> None:
    """Note these chunks as given to the session, then keep its `keep` newest."""
    for chunk_id in chunk_ids:
        conn.execute(query("record_recall"), {"session_id": session_id, "chunk_id": chunk_id})
    conn.execute(query("trim_recall_ledger"), {"session_id": session_id, "keep": keep})


def upsert_sketch(conn: psycopg.Connection, sketch: dict) -> None:
    """Write one sketch (the newest write in conversation time wins)."""
    conn.execute(query("upsert_sketch"), sketch)


def upsert_sketches(conn: psycopg.Connection, sketches: Sequence[dict]) -> None:
    """Write these sketches in one batch, in order (the newest write in conversation time wins)."""
    with conn.cursor() as cur:
        cur.executemany(query("upsert_sketch"), sketches)


def scratchpad_writes(conn: psycopg.Connection, start: datetime, end: datetime, shard: Shard) -> list[tuple]:
    """The scratchpad tool's calls of [start, end) of the shard's users, forks left out:
    (session_id, seq, user_id, ts, tool_args) in transcript order."""
    return conn.execute(query("scratchpad_writes"), {"start": start, "end": end, **shard.params}).fetchall()


def rows_needing_embedding(conn: psycopg.Connection, listing: str, model: str, after: int, limit: int,
                           shard: Shard) -> list[tuple]:
    """A page of the rows `listing` (a `*_needing_embedding` query) names, past id `after`:
    (id, text, stale)."""
    return conn.execute(query(listing), {"model": model, "after": after, "limit": limit,
                                         **shard.params}).fetchall()


def store_embeddings(conn: psycopg.Connection, table: str, ids: Sequence[int], vectors: np.ndarray,
                     model_id: str) -> None:
    """The vectors of these rows of `table`, made by `model_id`, written through a loaded temp table."""
    conn.execute(query("create_embedding_load"))
    with conn.cursor().copy(query("copy_embedding_load")) as copy:
        copy.set_types(["int8", "halfvec"])
        for row_id, vector in zip(ids, vectors.astype(np.float16)):  # unit vectors: within halfvec range
            copy.write_row((row_id, vector))
    conn.execute(query("analyze_embedding_load"))
    conn.execute(sql.SQL(query("apply_embedding_load")).format(table=sql.Identifier(table)), {"model": model_id})


def embedding_model_counts(conn: psycopg.Connection) -> list[tuple[str, str | None, int]]:
    """Served rows per table and embedding model (None: not embedded yet): (table, model, count)."""
    return conn.execute(query("embedding_model_counts")).fetchall()


def drop_index(conn: psycopg.Connection, name: str) -> None:
    """Drop the index `name` if it exists."""
    conn.execute(sql.SQL(query("drop_index")).format(index=sql.Identifier(name)))

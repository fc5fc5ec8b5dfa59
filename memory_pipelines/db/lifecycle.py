"""The memory archive and forgotten users (`sql/queries/lifecycle.sql`)."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from memory_pipelines.db.queries import query
from memory_pipelines.db.rows import grouped


def restore_archived(conn: psycopg.Connection, archive_id: int) -> list[tuple[str, int]]:
    """Move an archived row back to its table (a fact with the hidden rows archived with
    it); returns (table, id) of each row restored, none when there is no such archive row."""
    entry = conn.execute(query("archive_entry"), {"id": archive_id}).fetchone()
    if entry is None:
        return []
    rows = [entry]
    if entry[1] == "memory_facts":
        rows += conn.execute(query("archive_followers"), {"source_id": entry[2]}).fetchall()
    for row_id, table, source_id, data in rows:
        conn.execute(sql.SQL(query("restore_row")).format(table=sql.Identifier(table)), {"row": Jsonb(data)})
        conn.execute(query("delete_archive_row"), {"id": row_id})
    return [(table, source_id) for _, table, source_id, _ in rows]


def restore_reobserved(conn: psycopg.Connection, listing: str, params: dict) -> None:
    """Memory decay archived, observed again later: it comes back, and the upsert that
    follows updates it in place. So the tables do not depend on whether decay ran between
    the two observations (day by day) or after both (a range backfill)."""
    for (archive_id,) in conn.execute(query(listing), params).fetchall():
        restore_archived(conn, archive_id)


def archived_fact_keys(conn: psycopg.Connection, user_ids: Sequence[str]) -> dict[str, set[tuple[str, str]]]:
    """Each user's (category, key) pairs that decay ever archived (users with none left out)."""
    rows = conn.execute(query("archived_fact_keys"), {"user_ids": list(user_ids)})
    return {user_id: set(keys) for user_id, keys in grouped((u, (c, k)) for u, c, k in rows).items()}


def forgotten_for(conn: psycopg.Connection, user_ids: Sequence[str]) -> frozenset[tuple[str, str]]:
    return frozenset(tuple(r) for r in conn.execute(query("forgotten_for"), {"user_ids": list(user_ids)}))

"""Where a served row came from (`sql/queries/lineage.sql`)."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from memory_pipelines.db.queries import query


def lineage_rows(conn: psycopg.Connection, name: str, params: dict) -> list[dict]:
    """The rows of the lineage query `name` (one per kind of row, its calls and messages)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query(name), params).fetchall()

"""The database's tables and its shard layout (`sql/queries/schema.sql`)."""

from __future__ import annotations

import psycopg

from memory_pipelines.db.queries import query
from memory_pipelines.shards import ShardLayoutMismatch


def list_tables(conn: psycopg.Connection) -> list[str]:
    return [row[0] for row in conn.execute(query("list_tables"))]


def check_shard_layout(conn: psycopg.Connection, shards: int) -> None:
    """Record the shard count of the first run; refuse a run with another one."""
    with conn.transaction():
        conn.execute(query("record_shard_layout"), {"shards": shards})
        stored = conn.execute(query("shard_layout")).fetchone()[0]
    if stored != shards:
        raise ShardLayoutMismatch(stored, shards)


def change_shard_layout(conn: psycopg.Connection, shards: int) -> int | None:
    """Make `shards` the database's shard count; returns the count before (None: none yet)."""
    with conn.transaction():
        return conn.execute(query("change_shard_layout"), {"shards": shards}).fetchone()[0]

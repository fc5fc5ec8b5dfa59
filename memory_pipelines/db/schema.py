"""The database's tables and its shard layout (`sql/queries/schema.sql`)."""

from __future__ import annotations

import psycopg
from psycopg import sql

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


def server_facts(conn: psycopg.Connection) -> tuple[str, str | None, str | None, bool, bool]:
    """What doctor reports of the server: its version, pgvector's and pg_trgm's versions,
    whether pgvector has halfvec, whether the migration ledger exists."""
    return conn.execute(query("server_facts")).fetchone()


def applied_migrations(conn: psycopg.Connection) -> list[tuple[int, str]]:
    """The migrations the ledger records: (version, checksum), by version."""
    return conn.execute(query("applied_migrations")).fetchall()


def create_dagster_schema(conn: psycopg.Connection, schema: str) -> None:
    """Create Dagster's storage schema if it is missing (under a transaction-scoped lock)."""
    conn.execute(sql.SQL(query("create_dagster_schema")).format(schema=sql.Identifier(schema)))


def lock_dagster_storage(conn: psycopg.Connection) -> None:
    """Wait for, then hold to the transaction's end, the lock under which Dagster's tables are made."""
    conn.execute(query("lock_dagster_storage"))


def table_sizes(conn: psycopg.Connection) -> dict[str, int]:
    """Bytes per table of the pipeline's schema, with indexes and TOAST, by table name."""
    return dict(conn.execute(query("table_sizes")).fetchall())

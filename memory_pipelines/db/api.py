"""The reads and writes of `sql/queries/api.sql`."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from memory_pipelines.db.queries import query


# --- keys --------------------------------------------------------------------------------

def insert_api_key(conn: psycopg.Connection, *, name: str | None, user_id: str | None, admin: bool, key_hash: str,
                   prefix: str) -> dict:
    """Store a new key (by its hash); returns its row as a dict."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("insert_api_key"), {"name": name, "user_id": user_id, "admin": admin,
                                                    "key_hash": key_hash, "prefix": prefix}).fetchone()


def api_key_by_hash(conn: psycopg.Connection, key_hash: str) -> dict | None:
    """The live key of this hash as a dict (its last use noted), or None."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("api_key_by_hash"), {"key_hash": key_hash}).fetchone()


def api_keys(conn: psycopg.Connection) -> list[dict]:
    """Every key, revoked ones too, by id, as dicts."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("api_keys")).fetchall()


def revoke_api_key(conn: psycopg.Connection, key_id: int) -> dict | None:
    """Revoke a live key; returns its row as a dict (None: no live key of that id)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("revoke_api_key"), {"id": key_id}).fetchone()


# --- requests ----------------------------------------------------------------------------

def set_statement_timeout(conn: psycopg.Connection, ms: str) -> None:
    """Bound every statement of the current transaction to `ms` milliseconds."""
    conn.execute(query("set_statement_timeout"), {"ms": ms})


def claim_idempotency_key(conn: psycopg.Connection, key_id: int, idempotency_key: str, operation: str,
                          request_hash: str) -> int:
    """Claim a key's idempotency key for a request; returns 1 when claimed, 0 when it was before."""
    return conn.execute(query("claim_idempotency_key"), {"key_id": key_id, "idempotency_key": idempotency_key,
                                                         "operation": operation, "request_hash": request_hash}).rowcount


def idempotent_answer(conn: psycopg.Connection, key_id: int, idempotency_key: str) -> tuple:
    """The (operation, request_hash, response) stored under a claimed idempotency key."""
    return conn.execute(query("idempotent_answer"), {"key_id": key_id, "idempotency_key": idempotency_key}).fetchone()


def record_idempotent_answer(conn: psycopg.Connection, key_id: int, idempotency_key: str, response: dict) -> None:
    """Store the answer of the request that claimed the idempotency key."""
    conn.execute(query("record_idempotent_answer"), {"key_id": key_id, "idempotency_key": idempotency_key,
                                                     "response": Jsonb(response)})


# --- reads -------------------------------------------------------------------------------

def user_memory_summary(conn: psycopg.Connection, user_id: str) -> tuple | None:
    """The user's memory summary: (content, fact_count, updated_at), or None."""
    return conn.execute(query("user_memory_summary"), {"user_id": user_id}).fetchone()

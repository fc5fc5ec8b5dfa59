"""The reads and writes of `sql/queries/inventory.sql`."""

from __future__ import annotations

import psycopg

from memory_pipelines.db.queries import query


def user_known(conn: psycopg.Connection, user_id: str) -> bool:
    """Whether anything is stored for the user: sessions, facts or knowledge entries."""
    return conn.execute(query("user_known"), {"user_id": user_id}).fetchone()[0]


def stored_users(conn: psycopg.Connection) -> list[tuple]:
    """Each user with their sessions: (user, sessions, messages, first message, last active,
    facts, entries, chunks, archived), by user."""
    return conn.execute(query("stored_users")).fetchall()


def user_sessions(conn: psycopg.Connection, user_id: str) -> list[tuple]:
    """The user's sessions, each with its counts and its fork point or launching session."""
    return conn.execute(query("user_sessions"), {"user_id": user_id}).fetchall()

"""The reads and writes of `sql/queries/forks.sql`."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row

from memory_pipelines.db.queries import query


def session_seq_range(conn: psycopg.Connection, session_id: str) -> tuple[int, int, str] | None:
    """A session's first and last seq and its user (None: no such session in the archive)."""
    return conn.execute(query("session_seq_range"), {"session_id": session_id}).fetchone()


def merge_in_force(conn: psycopg.Connection, fork_session_id: str, parent_session_id: str) -> dict | None:
    """The merge of the fork into its parent that is in force (not restored), as a dict, or None."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("merge_in_force"), {"fork_session_id": fork_session_id,
                                                    "parent_session_id": parent_session_id}).fetchone()


def insert_merge(conn: psycopg.Connection, merge: dict) -> dict:
    """Record a merge (its fields but id and merged_at); returns its id and merged_at."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("insert_merge"), merge).fetchone()


def set_aside_messages(conn: psycopg.Connection, merge_id: int, session_id: str, first: int, last: int) -> None:
    """Move the session's turns first..last to superseded_messages under the merge."""
    conn.execute(query("set_aside_messages"), {"merge_id": merge_id, "session_id": session_id,
                                               "first": first, "last": last})


def delete_session_messages(conn: psycopg.Connection, session_id: str, first: int, last: int) -> int:
    """Delete the session's turns first..last; returns how many."""
    return conn.execute(query("delete_session_messages"), {
        "session_id": session_id, "first": first, "last": last}).rowcount


def bring_back_messages(conn: psycopg.Connection, merge_id: int) -> int:
    """The turns the merge set aside, back in messages; returns how many."""
    return conn.execute(query("bring_back_messages"), {"merge_id": merge_id}).rowcount


def mark_merge_restored(conn: psycopg.Connection, merge_id: int, restored_by: str) -> None:
    """Record that the merge was undone, and by whom."""
    conn.execute(query("mark_merge_restored"), {"merge_id": merge_id, "restored_by": restored_by})


def clear_derived(conn: psycopg.Connection, session_id: str, from_seq: int, day: str) -> None:
    """The session's rows derived from what a merge changed, cleared for the next run to
    build again from the day: its turn index from `from_seq` (search stops serving them
    now), its chunks and segments of the day on."""
    params = {"session_id": session_id, "from_seq": from_seq, "day": day}
    for name in ("clear_turns_from", "clear_chunks_from_day", "clear_segments_from_day"):
        conn.execute(query(name), params)

"""The turn-level index and its BM25 statistics (`sql/queries/turns.sql`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import psycopg
from psycopg.rows import dict_row

from memory_pipelines.core.turn_index import Citation, TurnCandidate
from memory_pipelines.db.queries import query
from memory_pipelines.db.rows import grouped, load_rows
from memory_pipelines.records import TurnRow
from memory_pipelines.shards import Shard


def sessions_search_keys(conn: psycopg.Connection, session_ids: Sequence[str]) -> dict[str, list[str]]:
    """Each session's chunk breadcrumbs and summary keys, sorted."""
    return grouped(conn.execute(query("sessions_search_keys"), {"session_ids": list(session_ids)}))


def store_turns(conn: psycopg.Connection, session_ids: Sequence[str], rows: Sequence[TurnRow],
                run_id: str) -> tuple[int, int]:
    """The sessions' turns as `rows` say (unchanged ones untouched, the others' gone);
    returns (written, removed). Only changed rows are sent: a turn's text search vector is
    computed by the server for every row sent, and most of a session's turns are unchanged
    when it is indexed again."""
    stored = {(session_id, seq): hashes for session_id, seq, *hashes in conn.execute(
        query("stored_turn_hashes"), {"session_ids": list(session_ids)})}
    changed = []
    for r in rows:
        content_hash = r.content_hash
        if stored.get((r.session_id, r.seq)) != [content_hash, r.window_hash]:
            changed.append((r.session_id, r.seq, r.user_id, r.pos, r.role, r.ts, r.language, r.body, list(r.keys),
                            content_hash, r.window_hash))
    written = 0
    if changed:
        load_rows(conn, "create_turn_load", "turn_load", changed)
        written = conn.execute(query("upsert_turns_from_load"), {"run_id": run_id}).rowcount
    # what was stored and is no longer built goes (read above, under the sessions' locks): no
    # statement sends every kept pair, and a batch with nothing gone sends none
    gone = stored.keys() - {(r.session_id, r.seq) for r in rows}
    removed = conn.execute(query("delete_turns"), {"session_ids": [s for s, _ in gone],
                                                   "seqs": [seq for _, seq in gone]}).rowcount if gone else 0
    return written, removed


def refresh_turn_stats(conn: psycopg.Connection, user_ids: Sequence[str]) -> None:
    """BM25's corpus statistics of these users, counted again from their turns."""
    if user_ids:
        conn.execute(query("delete_turn_stats"), {"user_ids": list(user_ids)})
        conn.execute(query("insert_turn_stats"), {"user_ids": list(user_ids)})


def sessions_to_index(conn: psycopg.Connection, start: datetime, end: datetime, first: str, last: str,
                      shard: Shard) -> list[str]:
    """The shard's sessions to index again for the days first..last ([start, end))."""
    return [r[0] for r in conn.execute(query("sessions_to_index"), {
        "start": start, "end": end, "first": first, "last": last, **shard.params})]


def turn_windows(conn: psycopg.Connection, session_ids: Sequence[str], los: Sequence[int], his: Sequence[int],
                 scope: dict) -> list[dict]:
    """The turns of passages, as dicts: per session, the positions from lo to hi, in the search's scope."""
    return conn.cursor(row_factory=dict_row).execute(query("turn_windows"), {
        "session_ids": session_ids, "los": los, "his": his, **scope}).fetchall()


def newest_turn(conn: psycopg.Connection, scope: dict) -> datetime | None:
    """The newest turn time of the scope's user (every user's with all_users); None: no turns."""
    return conn.execute(query("newest_turn"), scope).fetchone()[0]


def turn_decay_candidates(conn: psycopg.Connection, user_id: str,
                          session_id: str | None) -> tuple[list[TurnCandidate], list[Citation]]:
    """The user's turns (or one session's) and what cites them, for decay-scored retrieval."""
    scope = {"user_id": user_id, "session_id": session_id}
    with conn.cursor(row_factory=dict_row) as cur:
        turns = [TurnCandidate(**row) for row in cur.execute(query("turn_decay_candidates"), scope).fetchall()]
        citations = [Citation(**row) for row in cur.execute(query("turn_citations"), scope).fetchall()]
    return turns, citations


def count_turn_access(conn: psycopg.Connection, ids: Sequence[int]) -> None:
    """These turns were served: each counts an access."""
    conn.execute(query("count_turn_access"), {"ids": ids})

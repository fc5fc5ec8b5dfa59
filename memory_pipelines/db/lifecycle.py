"""The memory archive and forgotten users (`sql/queries/lifecycle.sql`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from memory_pipelines.core.knowledge_entries import DecayCandidate, Triple
from memory_pipelines.db.queries import query
from memory_pipelines.db.rows import grouped
from memory_pipelines.shards import Shard

# forget's statements in order, children before what they were derived from, each with the
# table it reports its rows under (hidden fact rows count as memory_facts)
FORGET_STATEMENTS = (
    ("forget_memory_facts_hidden", "memory_facts"),
    ("forget_memory_facts", "memory_facts"),
    ("forget_memory_fact_rejections", "memory_fact_rejections"),
    ("forget_memory_summary", "memory_summary"),
    ("forget_session_memory_state", "session_memory_state"),
    ("forget_memory_chunks", "memory_chunks"),
    ("forget_memory_turns", "memory_turns"),
    ("forget_memory_tree", "memory_tree"),
    ("forget_memory_turn_stats", "memory_turn_stats"),
    ("forget_sketches", "sketches"),
    ("forget_recall_ledger", "recall_ledger"),
    ("forget_knowledge_sources", "knowledge_sources"),
    ("forget_knowledge_entry_versions", "knowledge_entry_versions"),
    ("forget_knowledge_entries", "knowledge_entries"),
    ("forget_entity_graph", "entity_graph"),
    ("forget_error_memory", "error_memory"),
    ("forget_memory_archive", "memory_archive"),
    ("forget_session_summary_versions", "session_summary_versions"),
    ("forget_session_summaries", "session_summaries"),
    ("forget_conversation_segments", "conversation_segments"),
    ("forget_llm_calls", "llm_calls"),
    ("forget_quarantine", "quarantine"),
    ("forget_superseded_messages", "superseded_messages"),
    ("forget_session_merges", "session_merges"),
    ("forget_session_forks", "session_forks"),
    ("forget_messages", "messages"),
    ("forget_sessions", "sessions"),
)


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


# --- decay -------------------------------------------------------------------------------

def newest_message_before(conn: psycopg.Connection, before: datetime, shard: Shard) -> datetime | None:
    """The newest message of the shard's users before `before` (None: nothing ingested yet)."""
    return conn.execute(query("newest_message_before"), {"before": before, **shard.params}).fetchone()[0]


def user_clocks(conn: psycopg.Connection, user_ids: Sequence[str], before: datetime) -> dict[str, datetime]:
    """Each user's newest message before `before` (users with none left out)."""
    return {user: ts for user, ts in conn.execute(query("user_clocks"), {"user_ids": list(user_ids),
                                                                         "before": before}) if ts is not None}


def newest_messages_by_user_day(conn: psycopg.Connection, start: datetime, end: datetime,
                                shard: Shard) -> list[tuple[str, datetime]]:
    """Each of the shard's users' newest message of each UTC day in [start, end), oldest first."""
    return [(user, ts) for user, ts in conn.execute(query("newest_messages_by_user_day"),
                                                     {"start": start, "end": end, **shard.params})]


def decay_candidates(conn: psycopg.Connection, as_of: datetime, user_id: str | None, shard: Shard,
                     ids: Sequence[int] | None = None) -> list[DecayCandidate]:
    """Knowledge entries, then visible facts, seen by `as_of` (of one user, given one; of the
    shard's users; with `ids`, only rows of those ids)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return [DecayCandidate(**row) for listing in ("decay_knowledge_candidates", "decay_fact_candidates")
                for row in cur.execute(query(listing), {"as_of": as_of, "user_id": user_id, "ids": ids,
                                                        **shard.params}).fetchall()]


def graph_statements(conn: psycopg.Connection, user_ids: Sequence[str], all_users: bool) -> list[Triple]:
    """The entity graph's statements of these users (or everyone's), with what closed each."""
    with conn.cursor(row_factory=dict_row) as cur:
        return [Triple(**row) for row in cur.execute(query("graph_statements"),
                                                     {"user_ids": list(user_ids), "all_users": all_users}).fetchall()]


def decay_error_candidates(conn: psycopg.Connection, as_of: datetime, run_id: str, shard: Shard,
                           ids: Sequence[int] | None = None) -> list[dict]:
    """Error memories of the shard's users seen by `as_of`, not stored by run `run_id` (with
    `ids`, only those): id, key, user_id, observed_at, expires_at."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("decay_error_candidates"), {"as_of": as_of, "run_id": run_id, "ids": ids,
                                                             **shard.params}).fetchall()


# --- the archive -------------------------------------------------------------------------

def archive_rows(conn: psycopg.Connection, table: str, rows: list[dict], partition_key: str, run_id: str) -> None:
    """Move `rows` of `table` (id, key, reason, score, as_of) to memory_archive; a fact's
    hidden rows go with it (they point at their survivor)."""
    ids = [r["id"] for r in rows]
    if table == "memory_facts":
        conn.execute(query("archive_hidden_facts"), {"rows": Jsonb(rows), "partition_key": partition_key,
                                                      "run_id": run_id})
        conn.execute(query("delete_hidden_facts_of"), {"ids": ids})
    conn.execute(sql.SQL(query("archive_rows")).format(table=sql.Identifier(table)), {
        "table": table, "rows": Jsonb(rows), "partition_key": partition_key, "run_id": run_id})
    conn.execute(sql.SQL(query("delete_rows")).format(table=sql.Identifier(table)), {"ids": ids})


def touch_restored(conn: psycopg.Connection, table: str, row_id: int) -> None:
    """Count a restored row of `table` as accessed now."""
    conn.execute(sql.SQL(query("touch_restored")).format(table=sql.Identifier(table)), {"id": row_id})


def archived_rows(conn: psycopg.Connection, *, reason: str | None, since: datetime | None, run_id: str | None,
                  user_id: str | None, ids: Sequence[int], limit: int | None, with_followers: bool) -> list[dict]:
    """The archive's rows matching every filter given (ids: any of them), as dicts."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("archived_rows"), {
            "reason": reason, "since": since, "run_id": run_id, "user_id": user_id, "ids": list(ids),
            "limit": limit, "with_followers": with_followers}).fetchall()


# --- forgetting --------------------------------------------------------------------------

def forget_rows(conn: psycopg.Connection, user_id: str, session_id: str | None) -> dict[str, int]:
    """Delete a user's (or one session's, with its forks) rows of every table, through the
    lineage columns (`FORGET_STATEMENTS`, in order); returns the rows removed per table."""
    session_ids = [r[0] for r in conn.execute(query("forget_session_ids"),
                                              {"user_id": user_id, "session_id": session_id})]
    params = {"user_id": user_id, "session_ids": session_ids, "whole_user": session_id is None}
    removed: dict[str, int] = {}
    conn.execute(query("forget_unhide_facts"), params)
    for statement, table in FORGET_STATEMENTS:
        removed[table] = removed.get(table, 0) + conn.execute(query(statement), params).rowcount
    return removed


def record_forgotten(conn: psycopg.Connection, user_id: str, session_key: str) -> None:
    """The tombstone of a forgotten user ("") or session, so ingestion does not bring it back."""
    conn.execute(query("record_forgotten"), {"user_id": user_id, "session_key": session_key})


def unforget(conn: psycopg.Connection, user_id: str, session_key: str) -> bool:
    """Lift a tombstone; whether there was one."""
    return conn.execute(query("unforget"), {"user_id": user_id, "session_key": session_key}).rowcount > 0


# --- export and PII ----------------------------------------------------------------------

def export_entries(conn: psycopg.Connection, user_id: str | None) -> list[dict]:
    """The knowledge entries to export (the user's and global ones, or all), as dicts."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("export_entries"), {"user_id": user_id}).fetchall()


def pii_entries(conn: psycopg.Connection, user_id: str | None) -> list[dict]:
    """Knowledge entries that held PII (of one user, given one), oldest first, as dicts."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("pii_entries"), {"user_id": user_id}).fetchall()

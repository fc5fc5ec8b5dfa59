"""Facts, the memory summary and chunks (`sql/queries/facts_chunks.sql`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from memory_pipelines.core.fact_extraction import FactCandidate, Rejection
from memory_pipelines.db.lifecycle import archived_fact_keys, restore_reobserved
from memory_pipelines.db.queries import query
from memory_pipelines.db.rows import NO_CALL, by_session, grouped, in_rounds, load_rows, message_rows
from memory_pipelines.db.summaries import sessions_messages_after
from memory_pipelines.records import Message, shallow_fields
from memory_pipelines.shards import ALL_USERS, Shard


# --- sessions ----------------------------------------------------------------------------

def sessions_messages(conn: psycopg.Connection, session_ids: Sequence[str],
                      end: datetime | None = None) -> dict[str, list[Message]]:
    """Each session's messages sent before `end` (all of them: None), by seq (sessions
    without any left out)."""
    return by_session(message_rows(conn, "sessions_messages", {"session_ids": list(session_ids), "end": end}))


def sessions_judging_failed(conn: psycopg.Connection, session_ids: Sequence[str], partition_key: str) -> set[str]:
    return {r[0] for r in conn.execute(query("sessions_judging_failed"),
                                       {"session_ids": list(session_ids), "partition_key": partition_key})}


def sessions_dropped_seqs_by_day(conn: psycopg.Connection, session_ids: Sequence[str],
                                 partition_keys: Sequence[str]) -> dict[tuple[str, str], frozenset[int]]:
    """(session, day) -> the seqs noise judging dropped, for the days asked (pairs with none
    left out)."""
    rows = conn.execute(query("dropped_seqs"), {"session_ids": list(session_ids),
                                                "partition_keys": list(partition_keys)})
    return {pair: frozenset(seqs) for pair, seqs in grouped(((s, key), seq) for s, key, seq in rows).items()}


def sessions_summarized_short(conn: psycopg.Connection, session_ids: Sequence[str], partition_key: str,
                              end: datetime) -> dict[str, tuple[int | None, int]]:
    """Sessions whose summary as of the day does not reach their last reply sent before `end`
    (a chunk's memory comes with its summary): (cursor seq, last reply seq)."""
    rows = conn.execute(query("sessions_summarized_short"), {"session_ids": list(session_ids),
                                                             "partition_key": partition_key, "end": end})
    return {session_id: (cursor_seq, last_reply) for session_id, cursor_seq, last_reply in rows}


def sessions_with_undistilled_chunks(conn: psycopg.Connection, session_ids: Sequence[str],
                                     through: str) -> dict[str, str]:
    """Sessions whose chunks up to the day hold unextracted messages but were summarized before
    distillation calls wrote a chunk's memory: the first such day (a run from it rebuilds them)."""
    return dict(conn.execute(query("sessions_with_undistilled_chunks"),
                             {"session_ids": list(session_ids), "through": through}).fetchall())


def lock_users(conn: psycopg.Connection, user_ids: Sequence[str]) -> None:
    conn.execute(query("lock_users"), {"user_ids": list(user_ids)})


def try_lock_sessions_and_users(conn: psycopg.Connection, session_ids: Sequence[str],
                                user_ids: Sequence[str]) -> bool:
    """The sessions' and users' locks if no other transaction holds one: whether all were taken."""
    return conn.execute(query("try_lock_sessions_and_users"),
                        {"session_ids": list(session_ids), "user_ids": list(user_ids)}).fetchone()[0]


# --- facts -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DueSession:
    session_id: str
    user_id: str
    last_ts: datetime
    last_seq: int


@dataclass(frozen=True)
class StoredFact:
    id: int
    category: str
    key: str
    value: str
    source: str
    confidence: int
    last_verified_at: datetime
    source_context: str | None
    merged_into: int | None
    session_id: str
    seq_start: int
    seq_end: int
    model: str
    prompt_version: str


def sessions_due_for_extraction(conn: psycopg.Connection, end: datetime, stale_before: datetime,
                                shard: Shard = ALL_USERS, fresh_since: datetime | None = None) -> list[DueSession]:
    """Sessions due as of `end`; with `fresh_since`, only those with a message sent between
    it and `stale_before` (the others were due, and taken, earlier)."""
    with conn.cursor(row_factory=class_row(DueSession)) as cur:
        return cur.execute(query("sessions_due_for_extraction"), {
            "end": end, "stale_before": stale_before, "fresh_since": fresh_since, **shard.params}).fetchall()


def upsert_facts(conn: psycopg.Connection, observed: Sequence[tuple[str, FactCandidate, dict]],
                 ever_archived: Mapping[str, set[tuple[str, str]]] | None = None) -> None:
    """Upsert each (user id, candidate, lineage), in order, by (user_id, category, key) under
    the event-time rule, then re-merge the families of keys they touched (one statement for
    all: a family's merge follows from its rows alone). The user id is the session's, always.
    `ever_archived` is `archived_fact_keys` of the users when the caller read it already."""
    if not observed:
        return
    if ever_archived is None:
        ever_archived = archived_fact_keys(conn, sorted({user_id for user_id, _, _ in observed}))
    rows = [(user_id, c, {**shallow_fields(c), "user_id": user_id, **NO_CALL, **lineage})
            for user_id, c, lineage in observed]
    # one question to the archive per user, then one per candidate only where decay took its key
    for archived, group in groupby(rows, key=lambda r: (r[1].category, r[1].key) in ever_archived.get(r[0], ())):
        if archived:
            for user_id, c, row in group:
                restore_reobserved(conn, "archived_facts_reobserved", {
                    "user_id": user_id, "category": c.category, "key": c.key, "observed_at": c.last_verified_at})
                _upsert_fact_rows(conn, [row])
        else:
            _upsert_fact_rows(conn, [row for _, _, row in group])
    families = sorted({(user_id, c.canonical_key) for user_id, c, _ in rows})
    conn.execute(query("merge_fact_families"), {"user_ids": [u for u, _ in families],
                                                "canonical_keys": [k for _, k in families]})


_FACT_LOAD_COLUMNS = ("user_id", "category", "key", "canonical_key", "value", "source", "confidence",
                      "last_verified_at", "source_context", "session_id", "seq_start", "seq_end", "partition_key",
                      "run_id", "model", "prompt_version", "expires_at", "call_id")


def _upsert_fact_rows(conn: psycopg.Connection, rows: Sequence[dict]) -> None:
    """Upsert facts as if one by one, in order: loaded by `COPY`, then a statement per round."""
    rounds: Counter = Counter()
    keyed = (((row["user_id"], row["category"], row["key"]), [row[c] for c in _FACT_LOAD_COLUMNS]) for row in rows)
    load_rows(conn, "create_fact_load", "fact_load", in_rounds(keyed, rounds))
    for n in range(1, max(rounds.values(), default=0) + 1):
        conn.execute(query("upsert_facts_from_load"), {"round": n})


def insert_fact_rejections(conn: psycopg.Connection, user_id: str, session_id: str, rejections: Sequence[Rejection],
                           lineage: dict) -> None:
    if rejections:
        with conn.cursor() as cur:
            cur.executemany(query("insert_fact_rejection"), [
                {"user_id": user_id, "session_id": session_id, "item": Jsonb(r.item), "reason": r.reason,
                 "partition_key": lineage["partition_key"], "run_id": lineage["run_id"], "model": lineage["model"],
                 "prompt_version": lineage["prompt_version"], "call_id": lineage.get("call_id")}
                for r in rejections])


def mark_sessions_extracted(conn: psycopg.Connection, extracted: Sequence[tuple[DueSession, int, int]],
                            extracted_at: datetime, partition_key: str, run_id: str) -> None:
    """Each (session, facts accepted, facts rejected) extracted through its last activity."""
    with conn.cursor() as cur:
        cur.executemany(query("mark_session_extracted"), [{
            "session_id": due.session_id, "user_id": due.user_id, "extracted_through": due.last_ts,
            "extracted_seq": due.last_seq, "extracted_at": extracted_at, "facts_accepted": accepted,
            "facts_rejected": rejected, "partition_key": partition_key, "run_id": run_id}
            for due, accepted, rejected in extracted])


def facts_for_user(conn: psycopg.Connection, user_id: str, include_merged: bool = False) -> list[StoredFact]:
    """A user's facts; rows merged into another are hidden unless `include_merged`."""
    with conn.cursor(row_factory=class_row(StoredFact)) as cur:
        return cur.execute(query("visible_facts"), {"user_id": user_id, "include_merged": include_merged}).fetchall()


def users_with_outdated_memory_summary(conn: psycopg.Connection, shard: Shard = ALL_USERS) -> list[str]:
    return [r[0] for r in conn.execute(query("users_with_outdated_memory_summary"), shard.params)]


def memory_summary_hashes(conn: psycopg.Connection, user_ids: Sequence[str]) -> dict[str, str]:
    return dict(conn.execute(query("memory_summary_hashes"), {"user_ids": list(user_ids)}).fetchall())


def visible_facts_of_users(conn: psycopg.Connection, user_ids: Sequence[str]) -> dict[str, list[tuple[str, str, str]]]:
    """Each user's visible facts as (category, key, value), by category and key."""
    rows = conn.execute(query("visible_facts_of_users"), {"user_ids": list(user_ids)})
    return grouped((user_id, (category, key, value)) for user_id, category, key, value in rows)


def upsert_memory_summary(conn: psycopg.Connection, user_id: str, content: str, fact_count: int, facts_hash: str,
                          model: str, prompt_version: str, run_id: str) -> None:
    conn.execute(query("upsert_memory_summary"), {
        "user_id": user_id, "content": content, "fact_count": fact_count, "facts_hash": facts_hash,
        "model": model, "prompt_version": prompt_version, "run_id": run_id})


def delete_fact(conn: psycopg.Connection, user_id: str, key: str, category: str | None = None) -> int:
    """Delete a visible fact of this user, first the hidden rows merged into it. Returns
    the rows deleted (0: no such fact)."""
    deleted = 0
    for (fact_id,) in conn.execute(query("find_fact"), {"user_id": user_id, "key": key, "category": category}).fetchall():
        deleted += conn.execute(query("delete_fact_hidden_rows"), {"id": fact_id}).rowcount
        deleted += conn.execute(query("delete_fact"), {"id": fact_id, "user_id": user_id}).rowcount
    return deleted


# --- chunks ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ChunkWindowState:
    """A session as chunking sees it at a day's end."""
    session_id: str
    last_ts: datetime | None  # its last activity
    eligible: int | None  # the last seq out of the context window (None: none is)
    watermark: int  # the last seq already chunked (-1: none)


def chunk_window_states(conn: psycopg.Connection, session_ids: Sequence[str], end: datetime,
                        window: int) -> list[ChunkWindowState]:
    with conn.cursor(row_factory=class_row(ChunkWindowState)) as cur:
        return cur.execute(query("chunk_window_states"),
                           {"session_ids": list(session_ids), "end": end, "window": window}).fetchall()


def chunk_pending_messages(conn: psycopg.Connection, states: Sequence[ChunkWindowState],
                           end: datetime) -> dict[str, list[Message]]:
    """Each session's messages after its last chunk and before `end`, by seq."""
    return sessions_messages_after(conn, {s.session_id: s.watermark for s in states}, end)


_CHUNK_LOAD_COLUMNS = ("user_id", "session_id", "start_seq", "end_seq", "started_at", "ended_at", "content",
                       "content_hash", "breadcrumbs", "message_count", "summary_version", "partition_key", "run_id",
                       "model", "prompt_version")


def insert_chunks(conn: psycopg.Connection, rows: Sequence[dict]) -> int:
    """Chunks not stored yet (by session and content hash), in one batch loaded by `COPY`;
    how many were new."""
    if not rows:
        return 0
    load_rows(conn, "create_chunk_load", "chunk_load",
              ((position, *(row[c] for c in _CHUNK_LOAD_COLUMNS)) for position, row in enumerate(rows)))
    return conn.execute(query("insert_chunks_from_load")).rowcount

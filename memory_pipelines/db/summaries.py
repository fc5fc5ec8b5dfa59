"""Model calls, messages read back from the archive, noise segments and session summaries
(`sql/queries/summaries.sql`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from memory_pipelines.core.noise_filter import SessionJudgement
from memory_pipelines.core.summary_fold import StoredVersion, SummaryState, SummaryVersion
from memory_pipelines.db.queries import query
from memory_pipelines.db.rows import by_session, grouped, load_rows, message_rows
from memory_pipelines.llm.backends import ModelCall
from memory_pipelines.records import Message, Summary, TimeWindow, shallow_fields
from memory_pipelines.shards import ALL_USERS, Shard


# who judged a segment kept by rule (a successful tool result), as conversation_segments records it
EVIDENT_JUDGE = ("rule", "successful_tool_result", "none")


# --- model calls -------------------------------------------------------------------------

def insert_llm_calls(conn: psycopg.Connection, made: Iterable[tuple[ModelCall, str | None, str | None]], *,
                     run_id: str, asset: str) -> None:
    """Each (call, partition key, session id) as a row of `llm_calls`."""
    rows = [
        {**shallow_fields(c), "run_id": run_id, "asset": asset, "partition_key": key, "session_id": session_id}
        for c, key, session_id in made
    ]
    if rows:
        with conn.cursor() as cur:
            cur.executemany(query("insert_llm_call"), rows)


def run_tokens_spent(pool: ConnectionPool, run_id: str) -> int:
    with pool.connection() as conn:
        return conn.execute(query("run_tokens_spent"), {"run_id": run_id}).fetchone()[0]


# --- messages read back from the archive -------------------------------------------------

def messages_in_window(conn: psycopg.Connection, window: TimeWindow,
                       shard: Shard = ALL_USERS) -> dict[str, list[Message]]:
    """Each non-temp session of the shard's users: its messages sent in the window, by seq
    (sessions in order)."""
    return by_session(message_rows(conn, "messages_in_window",
                                     {"start": window.start, "end": window.end, **shard.params}))


def _cursor_params(cursors: Mapping[str, int | None]) -> dict:
    """Sessions and their cursor seqs as two bound arrays (no cursor: everything, -1)."""
    ids = list(cursors)
    return {"session_ids": ids, "after_seqs": [-1 if cursors[s] is None else cursors[s] for s in ids]}


def sessions_messages_after(conn: psycopg.Connection, cursors: Mapping[str, int | None],
                            end: datetime | None = None) -> dict[str, list[Message]]:
    """Each session's messages after its cursor seq (all of them: None) and sent before
    `end` (any time: None), by seq."""
    return by_session(message_rows(conn, "sessions_messages_after", {**_cursor_params(cursors), "end": end}))


def fork_inherited_messages(conn: psycopg.Connection, cursors: Mapping[str, int | None]) -> dict[str, list[Message]]:
    """For the forks among these sessions, the parent turns after the cursor up to the fork
    point that judging kept, named by the fork, by seq."""
    return by_session(message_rows(conn, "fork_inherited_messages", _cursor_params(cursors)))


def last_messages(conn: psycopg.Connection, session_id: str, limit: int) -> list[Message]:
    return message_rows(conn, "last_messages", {"session_id": session_id, "limit": limit})


def sessions_messages_in_windows_through(conn: psycopg.Connection, windows: Mapping[str, TimeWindow],
                                         cursors: Mapping[str, int | None]) -> dict[str, list[Message]]:
    """Each session's messages sent in its own window up to its cursor seq (none: None), by
    session and seq."""
    params = _cursor_params({s: cursors.get(s) for s in windows})
    return by_session(message_rows(conn, "sessions_messages_in_windows_through", {
        "session_ids": params["session_ids"], "through_seqs": params["after_seqs"],
        "starts": [windows[s].start for s in windows], "ends": [windows[s].end for s in windows]}))


def active_days(conn: psycopg.Connection, window: TimeWindow, reach: timedelta = timedelta(0),
                shard: Shard = ALL_USERS) -> frozenset[str]:
    """Partition keys of the days in `window` with a message of the shard's users, or on
    which one sent at most `reach` before the day began goes stale."""
    return frozenset(r[0] for r in conn.execute(query("active_days"), {
        "start": window.start, "end": window.end, "reach": reach, **shard.params}))


def sessions_in_window(conn: psycopg.Connection, window: TimeWindow,
                       shard: Shard = ALL_USERS) -> list[tuple[str, str]]:
    """(session, user) of the shard's non-temp sessions with a message in the window."""
    return conn.execute(query("sessions_in_window"),
                        {"start": window.start, "end": window.end, **shard.params}).fetchall()


def lock_sessions(conn: psycopg.Connection, session_ids: Sequence[str]) -> None:
    conn.execute(query("lock_sessions"), {"session_ids": list(session_ids)})


@contextmanager
def sessions_lock(conn: psycopg.Connection, session_ids: Sequence[str]) -> Iterator[None]:
    """Hold the sessions' advisory locks across several transactions on `conn`."""
    params = {"session_ids": list(session_ids)}
    conn.execute(query("lock_sessions_for_fold"), params)
    conn.commit()
    try:
        yield
    finally:
        conn.rollback()
        conn.execute(query("unlock_sessions_for_fold"), params)
        conn.commit()


# --- segments ----------------------------------------------------------------------------

def current_judgements(conn: psycopg.Connection, days: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(session, partition key) -> the fingerprint of its stored judgement, where that
    judgement succeeded whole: a session-day whose fingerprint matches needs no new judging."""
    rows = conn.execute(query("segment_fingerprints"), {"session_ids": [s for s, _ in days],
                                                        "partition_keys": [k for _, k in days]})
    return {(session_id, key): fingerprint for session_id, key, fingerprint in rows}


def replace_segments(conn: psycopg.Connection, judged_days: Sequence[tuple[str, SessionJudgement]], run_id: str,
                     judge: tuple[str, str, str]) -> None:
    """Each (partition key, judgement)'s session-day's segments replaced by its judgement's:
    the pairs' stored segments deleted in one statement, the new ones loaded by `COPY`."""
    if not judged_days:
        return
    conn.execute(query("delete_session_days_segments"), {
        "session_ids": [j.judged[0].segment.session_id for _, j in judged_days],
        "partition_keys": [key for key, _ in judged_days]})
    load_rows(conn, "create_segment_load", "segment_load", (
        (j.segment.segment_id, j.segment.session_id, j.segment.user_id, partition_key, j.segment.start_seq,
         j.segment.end_seq, j.segment.messages[0].ts, j.segment.messages[-1].ts, len(j.segment.messages),
         sum(len(m.content) for m in j.segment.messages), j.verdict.noise, j.verdict.reason, j.verdict.confidence,
         j.dropped, j.status, j.error, *(EVIDENT_JUDGE if j.evident else judge), judgement.fingerprint, run_id)
        for partition_key, judgement in judged_days for j in judgement.judged))
    conn.execute(query("insert_segments_from_load"))


# --- summaries ---------------------------------------------------------------------------

def summary_start_states(conn: psycopg.Connection, session_ids: Sequence[str],
                         first_partition: str) -> dict[str, SummaryState]:
    """The state each session's fold starting at `first_partition` begins from."""
    params = {"session_ids": list(session_ids), "partition_key": first_partition}
    states = {session_id: SummaryState(Summary.from_json(summary), cursor_seq, cursor_ts, version, fingerprint)
              for session_id, version, summary, cursor_seq, cursor_ts, fingerprint
              in conn.execute(query("summary_states_before"), params)}
    legacy = {session_id: SummaryState(Summary.from_json(summary), cursor_seq, cursor_ts, 0, "legacy")
              for session_id, summary, cursor_seq, cursor_ts in conn.execute(query("legacy_summaries"), params)}
    # a fork with no version of its own yet: its parent's at the fork point (its own count from 1)
    seeds = {session_id: SummaryState(Summary.from_json(summary), cursor_seq, cursor_ts, 0, fingerprint)
             for session_id, _, summary, cursor_seq, cursor_ts, fingerprint
             in conn.execute(query("fork_seed_states"), params)}
    return {s: states.get(s) or legacy.get(s) or seeds.get(s) or SummaryState() for s in session_ids}


def summary_versions_from(conn: psycopg.Connection, session_ids: Sequence[str],
                          first_partition: str) -> dict[str, list[StoredVersion]]:
    """Each session's versions built for `first_partition` and later days, in order."""
    rows = conn.execute(query("summary_versions_from"), {"session_ids": list(session_ids),
                                                         "partition_key": first_partition})
    return grouped((s, StoredVersion(v, key, step, count, fp, Summary.from_json(summary), cseq, cts))
                    for s, v, key, step, count, fp, summary, cseq, cts in rows)


def discard_summary_versions(conn: psycopg.Connection, session_id: str, partition_key: str, step: int) -> None:
    conn.execute(query("delete_summary_versions_from"),
                 {"session_id": session_id, "partition_key": partition_key, "step": step})
    conn.execute(query("drop_orphan_current_summary"), {"session_id": session_id})


def insert_summary_versions(conn: psycopg.Connection, versions: Sequence[SummaryVersion], run_id: str) -> None:
    """Versions loaded by `COPY`, then their sessions' current summaries set to each one's latest."""
    if not versions:
        return
    load_rows(conn, "create_version_load", "version_load", (
        (v.session_id, v.version, v.user_id, v.partition_key, v.step, v.step_count, v.kind, Jsonb(v.summary.to_json()),
         v.cursor_ts, v.cursor_seq, v.first_seq, v.last_seq, v.messages_in, Jsonb(list(v.trimmed)), v.backend,
         v.model, v.prompt_version, v.fingerprint, run_id, None if v.memory_items is None else Jsonb(v.memory_items),
         v.call_id) for v in versions))
    conn.execute(query("insert_versions_from_load"))
    conn.execute(query("refresh_current_summaries"),
                 {"session_ids": list(dict.fromkeys(v.session_id for v in versions))})


@dataclass(frozen=True)
class DistilledChunk:
    """A summarized chunk's version with the memory items its distillation call wrote."""

    session_id: str
    user_id: str
    version: int
    partition_key: str
    first_seq: int
    last_seq: int
    fingerprint: str
    model: str
    prompt_version: str
    call_id: str | None
    memory_items: dict


def distilled_chunks(conn: psycopg.Connection, session_ids: Sequence[str] | None, *, through: str | None = None,
                     day: str | None = None, shard: Shard = ALL_USERS) -> dict[str, list[DistilledChunk]]:
    """Chunk versions with their items, by session and version: of `session_ids` built for
    days up to `through`, or of every session but forks built for `day` (session_ids None),
    of the shard's users."""
    params = {"session_ids": None if session_ids is None else list(session_ids), "through": through, "day": day,
              **shard.params}
    with conn.cursor(row_factory=class_row(DistilledChunk)) as cur:
        return grouped((c.session_id, c) for c in cur.execute(query("distilled_chunks"), params))


def chunks_kept_messages(conn: psycopg.Connection, chunks: Sequence[DistilledChunk]) -> dict[str, list[Message]]:
    """The messages the chunks' distillation calls read: their seq spans, less system messages
    and what noise judging dropped; by session and seq."""
    return by_session(message_rows(conn, "chunks_kept_messages", {
        "session_ids": [c.session_id for c in chunks], "firsts": [c.first_seq for c in chunks],
        "lasts": [c.last_seq for c in chunks]}))


def current_summary(conn: psycopg.Connection, session_id: str) -> Summary | None:
    """The session's current summary; a fork without one of its own yet: its parent's at the
    fork point (what its own fold will start from)."""
    row = conn.execute(query("current_summary"), {"session_id": session_id}).fetchone()
    if row is None:
        row = conn.execute(query("fork_seed_states"), {"session_ids": [session_id]}).fetchone()
        return Summary.from_json(row[2]) if row else None
    return Summary.from_json(row[0])


def model_usage_by_purpose(conn: psycopg.Connection) -> list[tuple[str, int, int, int, int, int]]:
    """Calls that went to a model, per purpose: (purpose, calls, input tokens, output tokens,
    schema retries, failures), by purpose."""
    return conn.execute(query("model_usage_by_purpose")).fetchall()


def summarized_session_days(conn: psycopg.Connection) -> int:
    """The (session, day) pairs a chunk summary version was written for."""
    return conn.execute(query("summarized_session_days")).fetchone()[0]

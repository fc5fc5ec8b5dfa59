"""Repository functions: every read and write of the pipeline's tables goes through here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime, timedelta
from itertools import groupby

import pandas as pd
import psycopg
from psycopg import sql
from psycopg.rows import RowFactory, args_row, class_row, dict_row, kwargs_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from memory_pipelines.db.queries import query
from memory_pipelines.chunks import Chunk
from memory_pipelines.facts import FactCandidate, Rejection
from memory_pipelines.knowledge import FUNCTIONAL_RELATIONS, EntryCandidate, RelationCandidate
from memory_pipelines.llm.backends import ModelCall
from memory_pipelines.records import (
    ForkPoint, Message, QuarantinedRecord, StoredMessage, Summary, TimeWindow, TurnRow, shallow_fields,
)
from memory_pipelines.segments import SessionJudgement
from memory_pipelines.shards import ALL_USERS, Shard, ShardLayoutMismatch
from memory_pipelines.summaries import StoredVersion, SummaryState, SummaryVersion
from memory_pipelines.tree import EntityItem, Span, TreeNode

ARCHIVE_TABLES = ("messages", "sessions", "quarantine")
# the lineage of a row no model call wrote (the API's writes): its call_id
NO_CALL = {"call_id": None}
# who judged a segment kept by rule (a successful tool result), as conversation_segments records it
EVIDENT_JUDGE = ("rule", "successful_tool_result", "none")


def lock_transcript_writes(conn: psycopg.Connection) -> None:
    conn.execute(query("lock_transcript_writes"))


def stored_messages(conn: psycopg.Connection, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], StoredMessage]:
    """What the archive holds under these (session, seq) keys: the stored message's hash and user."""
    session_ids, seqs = zip(*keys) if keys else ((), ())
    rows = conn.execute(query("stored_messages"), {"session_ids": list(session_ids), "seqs": list(seqs)})
    return {(sid, seq): StoredMessage(content_hash, user_id) for sid, seq, content_hash, user_id in rows}


def session_owners(conn: psycopg.Connection, session_ids: Sequence[str]) -> dict[str, str]:
    return dict(conn.execute(query("session_owners"), {"session_ids": list(session_ids)}).fetchall())


def fork_points(conn: psycopg.Connection, session_ids: Sequence[str]) -> dict[str, ForkPoint]:
    """The stored fork points of those of these sessions that are forks."""
    with conn.cursor(row_factory=kwargs_row(ForkPoint)) as cur:
        return {f.session_id: f for f in cur.execute(query("session_fork_points"), {"session_ids": list(session_ids)})}


def forks_of(conn: psycopg.Connection, session_id: str) -> list[tuple[ForkPoint, str]]:
    """The session's forks, each with its summary's current discussion ("" before it has one)."""
    return [(ForkPoint(s, parent, at, user), current) for s, parent, at, user, current in conn.execute(
        query("session_forks_of"), {"session_id": session_id})]


def superseded_keys(conn: psycopg.Connection, session_ids: Sequence[str]) -> frozenset[tuple[str, int, str]]:
    return frozenset(conn.execute(query("superseded_keys"), {"session_ids": list(session_ids)}).fetchall())


def insert_fork_points(conn: psycopg.Connection, forks: Iterable[ForkPoint], created_by: str) -> None:
    rows = [{**asdict(f), "created_by": created_by} for f in forks]
    if rows:
        with conn.cursor() as cur:
            cur.executemany(query("insert_session_fork"), rows)


def insert_messages(conn: psycopg.Connection, messages: Iterable[Message], run_id: str) -> int:
    count = 0
    with conn.cursor().copy(query("copy_messages")) as copy:
        for m in messages:
            copy.write_row((
                m.session_id, m.seq, m.user_id, m.agent_id, m.role, m.content, m.ts, m.tool_name,
                Jsonb(m.tool_args) if m.tool_args is not None else None, m.tool_call_id, Jsonb(m.metadata),
                m.content_hash, m.source_file, m.source_line, run_id,
            ))
            count += 1
    return count


def insert_quarantine(
    conn: psycopg.Connection, records: Iterable[QuarantinedRecord], partition_key: str, run_id: str
) -> None:
    rows = [
        {
            "source_file": r.source_file, "source_line": r.source_line, "reason": str(r.reason),
            "detail": r.detail, "raw": r.raw, "raw_bytes": r.raw_bytes, "session_id": r.session_id,
            "seq": r.seq, "partition_key": partition_key, "run_id": run_id,
        }
        for r in records
    ]
    if rows:
        with conn.cursor() as cur:
            cur.executemany(query("insert_quarantine"), rows)


def resolve_held_refusals(conn: psycopg.Connection, messages: Sequence[Message], run_id: str) -> int:
    """Marks resolved (by `run_id`) the open refusals of the records of `messages` (as read)
    the archive now holds, stored now or before; returns how many. Only the messages of files
    with open refusals are looked up."""
    files = {m.source_file for m in messages}
    if not files:
        return 0
    rows = conn.execute(query("open_quarantine_files"), {"files": sorted(files)}).fetchall()
    open_files = {f for (f,) in rows}
    held = [m for m in messages if m.source_file in open_files]
    if not held:
        return 0
    params = {"files": [m.source_file for m in held], "lines": [m.source_line for m in held],
              "session_ids": [m.session_id for m in held], "seqs": [m.seq for m in held],
              "hashes": [m.content_hash for m in held], "run_id": run_id}
    return conn.execute(query("resolve_held_refusals"), params).rowcount


def resolve_clean_file_refusals(conn: psycopg.Connection, location: str, scan_key: str, files: Sequence[str],
                                run_id: str) -> int:
    """Marks resolved the open refusals (conflicts with the archive aside) of those of `files`
    whose index entry, scanned under `scan_key`, refuses no record; returns how many."""
    if not files:
        return 0
    return conn.execute(query("resolve_clean_file_refusals"), {
        "location": location, "scan_key": scan_key, "files": list(files), "run_id": run_id}).rowcount


@dataclass(frozen=True, slots=True)
class QuarantineRow:
    id: int
    source_file: str
    source_line: int
    reason: str
    detail: str
    raw: str
    raw_bytes: int
    session_id: str | None
    seq: int | None
    partition_key: str
    run_id: str
    quarantined_at: datetime
    resolved_at: datetime | None
    resolved_by_run: str | None


def quarantine_rows(conn: psycopg.Connection, *, open_rows: bool = True, resolved: bool = False,
                    reason: str | None = None, limit: int = 100) -> list[QuarantineRow]:
    """Refused records, open ones first (by file and line), then resolved ones."""
    with conn.cursor(row_factory=class_row(QuarantineRow)) as cur:
        return cur.execute(query("quarantine_rows"), {"open": open_rows, "resolved": resolved, "reason": reason,
                                                      "limit": limit}).fetchall()


def quarantine_totals(conn: psycopg.Connection, reason: str | None = None) -> tuple[int, int]:
    """How many refusals are open and how many resolved."""
    open_count, resolved = conn.execute(query("quarantine_totals"), {"reason": reason}).fetchone()
    return open_count, resolved


def refresh_sessions(conn: psycopg.Connection, session_ids: Sequence[str]) -> None:
    if session_ids:
        conn.execute(query("refresh_sessions"), {"session_ids": list(session_ids)})


def list_tables(conn: psycopg.Connection) -> list[str]:
    return [row[0] for row in conn.execute(query("list_tables"))]


def row_counts(conn: psycopg.Connection, tables: Sequence[str]) -> dict[str, int]:
    template = sql.SQL(query("table_row_count"))
    return {
        table: conn.execute(template.format(table=sql.Identifier(table))).fetchone()[0]
        for table in tables
    }


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

def _positional_rows(record: type) -> RowFactory:
    """Rows as `record`s passed by position (a third faster than by name, at 100k messages a
    read): the query's columns must be the record's leading fields, in order."""
    names = tuple(f.name for f in fields(record))
    by_position = args_row(record)

    def factory(cursor):
        columns = tuple(column.name for column in cursor.description or ())
        if columns != names[:len(columns)]:
            raise ValueError(f"a {record.__name__} query's columns {columns} are not its leading fields in order")
        return by_position(cursor)

    return factory


_MESSAGE_ROWS = _positional_rows(Message)


def _message_rows(conn: psycopg.Connection, name: str, params: dict) -> list[Message]:
    with conn.cursor(row_factory=_MESSAGE_ROWS) as cur:
        return cur.execute(query(name), params).fetchall()


def _by_session(messages: Sequence[Message]) -> dict[str, list[Message]]:
    """Messages ordered by session, grouped by it (sessions without any are left out)."""
    return {session_id: list(group) for session_id, group in groupby(messages, key=lambda m: m.session_id)}


def _grouped(rows: Iterable[Sequence]) -> dict:
    """(key, value) rows -> key -> the values, in row order (keys without rows left out)."""
    grouped: dict = {}
    for key, value in rows:
        grouped.setdefault(key, []).append(value)
    return grouped


def messages_in_window(conn: psycopg.Connection, window: TimeWindow,
                       shard: Shard = ALL_USERS) -> dict[str, list[Message]]:
    """Each non-temp session of the shard's users: its messages sent in the window, by seq
    (sessions in order)."""
    return _by_session(_message_rows(conn, "messages_in_window",
                                     {"start": window.start, "end": window.end, **shard.params}))


def _cursor_params(cursors: Mapping[str, int | None]) -> dict:
    """Sessions and their cursor seqs as two bound arrays (no cursor: everything, -1)."""
    ids = list(cursors)
    return {"session_ids": ids, "after_seqs": [-1 if cursors[s] is None else cursors[s] for s in ids]}


def sessions_messages_after(conn: psycopg.Connection, cursors: Mapping[str, int | None],
                            end: datetime | None = None) -> dict[str, list[Message]]:
    """Each session's messages after its cursor seq (all of them: None) and sent before
    `end` (any time: None), by seq."""
    return _by_session(_message_rows(conn, "sessions_messages_after", {**_cursor_params(cursors), "end": end}))


def fork_inherited_messages(conn: psycopg.Connection, cursors: Mapping[str, int | None]) -> dict[str, list[Message]]:
    """For the forks among these sessions, the parent turns after the cursor up to the fork
    point that judging kept, named by the fork, by seq."""
    return _by_session(_message_rows(conn, "fork_inherited_messages", _cursor_params(cursors)))


def last_messages(conn: psycopg.Connection, session_id: str, limit: int) -> list[Message]:
    return _message_rows(conn, "last_messages", {"session_id": session_id, "limit": limit})


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


# --- segments ----------------------------------------------------------------------------

def current_judgements(conn: psycopg.Connection, days: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(session, partition key) -> the fingerprint of its stored judgement, where that
    judgement succeeded whole: a session-day whose fingerprint matches needs no new judging."""
    rows = conn.execute(query("segment_fingerprints"), {"session_ids": [s for s, _ in days],
                                                        "partition_keys": [k for _, k in days]})
    return {(session_id, key): fingerprint for session_id, key, fingerprint in rows}


def replace_segments(conn: psycopg.Connection, judgement: SessionJudgement, partition_key: str, run_id: str,
                     judge: tuple[str, str, str]) -> None:
    first = judgement.judged[0].segment
    conn.execute(query("delete_session_day_segments"),
                 {"session_id": first.session_id, "partition_key": partition_key})
    rows = []
    for judged in judgement.judged:
        s, v = judged.segment, judged.verdict
        rows.append({
            "segment_id": s.segment_id, "session_id": s.session_id, "user_id": s.user_id,
            "partition_key": partition_key, "start_seq": s.start_seq, "end_seq": s.end_seq,
            "started_at": s.messages[0].ts, "ended_at": s.messages[-1].ts, "message_count": len(s.messages),
            "chars": sum(len(m.content) for m in s.messages), "is_noise": v.noise, "noise_reason": v.reason,
            "confidence": v.confidence, "dropped": judged.dropped, "judge_status": judged.status,
            "judge_error": judged.error, **dict(zip(("judge_backend", "judge_model", "prompt_version"),
                                                    EVIDENT_JUDGE if judged.evident else judge)),
            "fingerprint": judgement.fingerprint, "run_id": run_id,
        })
    with conn.cursor() as cur:
        cur.executemany(query("insert_segment"), rows)


def sessions_dropped_seqs_by_day(conn: psycopg.Connection, session_ids: Sequence[str],
                                 partition_keys: Sequence[str]) -> dict[tuple[str, str], frozenset[int]]:
    """(session, day) -> the seqs noise judging dropped, for the days asked (pairs with none
    left out)."""
    rows = conn.execute(query("dropped_seqs"), {"session_ids": list(session_ids),
                                                "partition_keys": list(partition_keys)})
    return {pair: frozenset(seqs) for pair, seqs in _grouped(((s, key), seq) for s, key, seq in rows).items()}


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
    return _grouped((s, StoredVersion(v, key, step, count, fp, Summary.from_json(summary), cseq, cts))
                    for s, v, key, step, count, fp, summary, cseq, cts in rows)


def discard_summary_versions(conn: psycopg.Connection, session_id: str, partition_key: str, step: int) -> None:
    conn.execute(query("delete_summary_versions_from"),
                 {"session_id": session_id, "partition_key": partition_key, "step": step})
    conn.execute(query("drop_orphan_current_summary"), {"session_id": session_id})


def insert_summary_version(conn: psycopg.Connection, version: SummaryVersion, run_id: str) -> None:
    row = shallow_fields(version)
    row.update(summary=Jsonb(version.summary.to_json()), trimmed=Jsonb(list(version.trimmed)), run_id=run_id,
               memory_items=None if version.memory_items is None else Jsonb(version.memory_items))
    conn.execute(query("insert_summary_version"), row)
    conn.execute(query("refresh_current_summary"), {"session_id": version.session_id})


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
        return _grouped((c.session_id, c) for c in cur.execute(query("distilled_chunks"), params))


def chunks_kept_messages(conn: psycopg.Connection, chunks: Sequence[DistilledChunk]) -> dict[str, list[Message]]:
    """The messages the chunks' distillation calls read: their seq spans, less system messages
    and what noise judging dropped; by session and seq."""
    return _by_session(_message_rows(conn, "chunks_kept_messages", {
        "session_ids": [c.session_id for c in chunks], "firsts": [c.first_seq for c in chunks],
        "lasts": [c.last_seq for c in chunks]}))


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


def current_summary(conn: psycopg.Connection, session_id: str) -> Summary | None:
    """The session's current summary; a fork without one of its own yet: its parent's at the
    fork point (what its own fold will start from)."""
    row = conn.execute(query("current_summary"), {"session_id": session_id}).fetchone()
    if row is None:
        row = conn.execute(query("fork_seed_states"), {"session_ids": [session_id]}).fetchone()
        return Summary.from_json(row[2]) if row else None
    return Summary.from_json(row[0])


def sessions_messages_in_windows(conn: psycopg.Connection,
                                 windows: Mapping[str, TimeWindow]) -> dict[str, list[Message]]:
    """Each session's messages sent in its own window, by session and seq."""
    ids = list(windows)
    return _by_session(_message_rows(conn, "sessions_messages_in_windows", {
        "session_ids": ids, "starts": [windows[s].start for s in ids], "ends": [windows[s].end for s in ids]}))


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
                                shard: Shard = ALL_USERS) -> list[DueSession]:
    with conn.cursor(row_factory=class_row(DueSession)) as cur:
        return cur.execute(query("sessions_due_for_extraction"),
                           {"end": end, "stale_before": stale_before, **shard.params}).fetchall()


def sessions_messages(conn: psycopg.Connection, session_ids: Sequence[str],
                      end: datetime | None = None) -> dict[str, list[Message]]:
    """Each session's messages sent before `end` (all of them: None), by seq (sessions
    without any left out)."""
    return _by_session(_message_rows(conn, "sessions_messages", {"session_ids": list(session_ids), "end": end}))


def sessions_judging_failed(conn: psycopg.Connection, session_ids: Sequence[str], partition_key: str) -> set[str]:
    return {r[0] for r in conn.execute(query("sessions_judging_failed"),
                                       {"session_ids": list(session_ids), "partition_key": partition_key})}


def lock_users(conn: psycopg.Connection, user_ids: Sequence[str]) -> None:
    conn.execute(query("lock_users"), {"user_ids": list(user_ids)})


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


def _restore_reobserved(conn: psycopg.Connection, listing: str, params: dict) -> None:
    """Memory decay archived, observed again later: it comes back, and the upsert that
    follows updates it in place. So the tables do not depend on whether decay ran between
    the two observations (day by day) or after both (a range backfill)."""
    for (archive_id,) in conn.execute(query(listing), params).fetchall():
        restore_archived(conn, archive_id)


def archived_fact_keys(conn: psycopg.Connection, user_ids: Sequence[str]) -> dict[str, set[tuple[str, str]]]:
    """Each user's (category, key) pairs that decay ever archived (users with none left out)."""
    rows = conn.execute(query("archived_fact_keys"), {"user_ids": list(user_ids)})
    return {user_id: set(keys) for user_id, keys in _grouped((u, (c, k)) for u, c, k in rows).items()}


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
        with conn.cursor() as cur:
            if archived:
                for user_id, c, row in group:
                    _restore_reobserved(conn, "archived_facts_reobserved", {
                        "user_id": user_id, "category": c.category, "key": c.key, "observed_at": c.last_verified_at})
                    cur.execute(query("upsert_fact"), row)
            else:
                cur.executemany(query("upsert_fact"), [row for _, _, row in group])
    families = sorted({(user_id, c.canonical_key) for user_id, c, _ in rows})
    conn.execute(query("merge_fact_families"), {"user_ids": [u for u, _ in families],
                                                "canonical_keys": [k for _, k in families]})


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
    return _grouped((user_id, (category, key, value)) for user_id, category, key, value in rows)


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


def insert_chunks(conn: psycopg.Connection, rows: Sequence[dict]) -> int:
    """Chunks not stored yet (by session and content hash), in one batch; how many were new."""
    if not rows:
        return 0
    with conn.cursor() as cur:
        cur.executemany(query("insert_chunk"), rows)
        return cur.rowcount


# --- data-quality scopes -----------------------------------------------------------------

def check_frame(conn: psycopg.Connection, rows_query: str, params: Mapping) -> pd.DataFrame:
    """The rows in scope of a data-quality check (a named query of sql/queries/checks.sql)."""
    with conn.cursor() as cur:
        rows = cur.execute(query(rows_query), params).fetchall()
        return pd.DataFrame(rows, columns=[column.name for column in cur.description])


def check_frames(conn: psycopg.Connection, rows_query: str, params: Mapping, columns: Sequence[str] | None,
                 rows: int) -> Iterator[pd.DataFrame]:
    """The rows in scope of a data-quality check as frames of about `rows` rows, never
    splitting rows equal on `columns` (ordered by them; (): cut anywhere; None: one frame). A
    server-side cursor reads them a block at a time, so a check over a year's rows holds one
    frame at a time."""
    if columns is None:
        yield check_frame(conn, rows_query, params)
        return
    statement = sql.SQL(query(rows_query).rstrip().rstrip(";"))
    if columns:
        statement = sql.SQL(query("check_rows_ordered")).format(
            rows=statement, columns=sql.SQL(", ").join(map(sql.Identifier, columns)))
    with conn.transaction(), conn.cursor(name="memory_check_rows") as cur:
        conn.execute(query("check_rows_plan"))
        cur.execute(statement, params)
        names = [column.name for column in cur.description]
        positions = [names.index(c) for c in columns]
        pending: list[tuple] = []
        while block := cur.fetchmany(rows):
            pending += block
            if len(pending) < rows:
                continue
            cut = len(pending)
            if positions:  # the last row whose key differs from the one before: a frame ends there
                last = [pending[-1][i] for i in positions]
                while cut > 0 and [pending[cut - 1][i] for i in positions] == last:
                    cut -= 1
            if cut:
                yield pd.DataFrame(pending[:cut], columns=names)
                pending = pending[cut:]
        yield pd.DataFrame(pending, columns=names)


# --- knowledge ---------------------------------------------------------------------------

def summaries_as_of_sessions(conn: psycopg.Connection, session_ids: Sequence[str],
                             partition_key: str) -> dict[str, tuple[int, Summary]]:
    """Each session's newest summary version up to the day: (version, summary); sessions
    without one are left out."""
    rows = conn.execute(query("summaries_as_of_sessions"), {"session_ids": list(session_ids),
                                                            "partition_key": partition_key})
    return {session_id: (version, Summary.from_json(summary)) for session_id, version, summary in rows}


def knowledge_source_fingerprints(conn: psycopg.Connection, session_ids: Sequence[str],
                                  partition_key: str) -> dict[str, str]:
    return dict(conn.execute(query("knowledge_source_fingerprints"), {"session_ids": list(session_ids),
                                                                      "partition_key": partition_key}).fetchall())


def forge_knowledge(conn: psycopg.Connection, entries: Sequence[tuple[EntryCandidate, dict]]) -> int:
    """Persist entries, each with its lineage (a batch of sessions' at once): a version row
    per distinct content, the entry updated in place. Returns the entries inserted or changed."""
    if not entries:
        return 0
    rows = [{**shallow_fields(e), "entry_key": e.key, "content_hash": e.content_hash, "tags": list(e.tags),
             "pii_kinds": list(e.pii_kinds), **NO_CALL, **lineage} for e, lineage in entries]
    ever_archived = {key for (key,) in conn.execute(query("archived_entry_keys"),
                                                    {"entry_keys": [row["entry_key"] for row in rows]})}
    written = 0
    # in the given order, which decides the serial ids new entries get
    for archived, group in groupby(rows, key=lambda row: row["entry_key"] in ever_archived):
        if archived:
            written += sum(_forge_archived_key(conn, row) for row in group)
            continue
        # keys decay never took: plain upserts. An entry's version counts its key's distinct
        # contents, so all versions go first: an entry upserted twice ends with the count of
        # both either way.
        group = list(group)
        with conn.cursor() as cur:
            cur.executemany(query("upsert_knowledge_version"), group)
        written += _upsert_entries(conn, group)
    return written


_ENTRY_LOAD_COLUMNS = ("entry_key", "user_id", "kind", "title", "content", "tags", "confidence", "importance",
                       "scope", "scope_id", "consent_basis", "has_pii", "pii_kinds", "observed_at", "valid_until",
                       "session_id", "seq_start", "seq_end", "partition_key", "run_id", "model", "prompt_version",
                       "call_id")


def _upsert_entries(conn: psycopg.Connection, rows: Sequence[dict]) -> int:
    """Upsert entries as if one by one, in order: loaded by `COPY`, then one statement per
    round, round n holding each key's n-th row (the rows of one key apply in order; those of
    different keys do not depend on each other). Returns the entries inserted or changed."""
    occurrences: Counter[str] = Counter()
    conn.execute(query("create_entry_load"))
    with conn.cursor().copy(query("copy_entry_load")) as copy:
        for position, row in enumerate(rows):
            occurrences[row["entry_key"]] += 1
            copy.write_row((position, occurrences[row["entry_key"]], *(row[c] for c in _ENTRY_LOAD_COLUMNS)))
    written = sum(conn.execute(query("upsert_entries_from_load"), {"round": n}).rowcount
                  for n in range(1, max(occurrences.values(), default=0) + 1))
    conn.execute(query("drop_entry_load"))  # a second batch in the same transaction starts empty
    return written


def _forge_archived_key(conn: psycopg.Connection, row: dict) -> int:
    archived = conn.execute(query("archived_entry_newer"), {"entry_key": row["entry_key"],
                                                            "observed_at": row["observed_at"]}).fetchone()
    if archived is not None:
        # An older observation than the archived entry's last (its day run late, after a
        # failure): the entry stays archived, but when the observation is new to its
        # history it gets the versions and first-seen time the days in order give it.
        if conn.execute(query("upsert_knowledge_version"), row).rowcount:
            _fold_into_archived_entry(conn, archived, row)
        return 0
    _restore_reobserved(conn, "archived_entries_reobserved", {"entry_key": row["entry_key"],
                                                              "observed_at": row["observed_at"]})
    conn.execute(query("upsert_knowledge_version"), row)
    return _upsert_entries(conn, [row])


def _fold_into_archived_entry(conn: psycopg.Connection, archived: tuple, row: dict) -> None:
    """Restore the archived entry, upsert the older observation into it (its content stays:
    event time wins) and archive it again as decay did."""
    archive_id, reason, score, as_of, partition_key, run_id = archived
    [(_, entry_id)] = restore_archived(conn, archive_id)
    _upsert_entries(conn, [row])
    table = sql.Identifier("knowledge_entries")
    conn.execute(sql.SQL(query("archive_rows")).format(table=table), {
        "table": "knowledge_entries", "rows": Jsonb([{"id": entry_id, "key": row["entry_key"], "reason": reason,
                                                      "score": score, "as_of": as_of.isoformat()}]),
        "partition_key": partition_key, "run_id": run_id})
    conn.execute(sql.SQL(query("delete_rows")).format(table=table), {"ids": [entry_id]})


def forge_relations(conn: psycopg.Connection, relations: Sequence[tuple[RelationCandidate, dict]]) -> None:
    """Insert triples, each with its lineage (its user among it), then close the one-value
    relations they contradict (in any order: closing does not depend on it)."""
    if not relations:
        return
    with conn.pipeline():  # nothing here waits on an answer: one round trip
        for r, lineage in relations:
            conn.execute(query("insert_relation"), {**shallow_fields(r), **NO_CALL, **lineage})
        for user_id, subject, relation in sorted({(lineage["user_id"], r.subject, r.relation)
                                                  for r, lineage in relations if r.relation in FUNCTIONAL_RELATIONS}):
            conn.execute(query("close_contradicted"), {"user_id": user_id, "subject": subject, "relation": relation})


def record_knowledge_sources(conn: psycopg.Connection, rows: Sequence[dict]) -> None:
    """What each session-day's synthesis followed from (its fingerprint) and how many entries it gave."""
    if rows:
        with conn.cursor() as cur:
            cur.executemany(query("record_knowledge_source"), rows)


def forgotten_for(conn: psycopg.Connection, user_ids: Sequence[str]) -> frozenset[tuple[str, str]]:
    return frozenset(tuple(r) for r in conn.execute(query("forgotten_for"), {"user_ids": list(user_ids)}))


# --- turns -------------------------------------------------------------------------------

def sessions_search_keys(conn: psycopg.Connection, session_ids: Sequence[str]) -> dict[str, list[str]]:
    """Each session's chunk breadcrumbs and summary keys, sorted."""
    return _grouped(conn.execute(query("sessions_search_keys"), {"session_ids": list(session_ids)}))


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
        conn.execute(query("create_turn_load"))
        with conn.cursor().copy(query("copy_turn_load")) as copy:
            for row in changed:
                copy.write_row(row)
        written = conn.execute(query("upsert_turns_from_load"), {"run_id": run_id}).rowcount
        conn.execute(query("drop_turn_load"))  # a second batch in the same transaction starts empty
    removed = conn.execute(query("delete_turns_except"), {
        "session_ids": list(session_ids), "kept_sessions": [r.session_id for r in rows],
        "kept_seqs": [r.seq for r in rows]}).rowcount
    return written, removed


def sessions_chunk_leaves(conn: psycopg.Connection, session_ids: Sequence[str]) -> dict[str, list[Chunk]]:
    """Each session's stored chunks in seq order, with their breadcrumbs: its tree's leaves."""
    leaves: dict[str, list[Chunk]] = {}
    with conn.cursor(row_factory=kwargs_row(Chunk)) as cur:
        for leaf in cur.execute(query("sessions_chunk_leaves"), {"session_ids": list(session_ids)}):
            leaves.setdefault(leaf.session_id, []).append(replace(leaf, breadcrumbs=tuple(leaf.breadcrumbs)))
    return leaves


def _tree_node(row: dict) -> TreeNode:
    return TreeNode(**{**row, "spans": tuple(Span(**s) for s in row["spans"]), "keys": tuple(row["keys"])})


def users_session_roots(conn: psycopg.Connection, user_ids: Sequence[str]) -> dict[str, list[TreeNode]]:
    """The roots of each user's session trees, by start."""
    roots: dict[str, list[TreeNode]] = {}
    with conn.cursor(row_factory=dict_row) as cur:
        for row in cur.execute(query("users_session_roots"), {"user_ids": list(user_ids)}):
            roots.setdefault(row["user_id"], []).append(_tree_node(row))
    return roots


def users_entity_items(conn: psycopg.Connection, user_ids: Sequence[str]) -> dict[tuple[str, str], list[EntityItem]]:
    """(user, entity) -> what the user's memory holds about the entity, in time order."""
    items: dict[tuple[str, str], list[EntityItem]] = {}
    for user_id, entity, kind, item_key, at, text, keys, session_id, first, last in conn.execute(
            query("users_entity_items"), {"user_ids": list(user_ids)}):
        spans = (Span(session_id, first, last),) if session_id is not None else ()
        items.setdefault((user_id, entity), []).append(EntityItem(kind, item_key, at, spans, text, tuple(keys)))
    return items


def user_tree_nodes(conn: psycopg.Connection, user_id: str) -> list[TreeNode]:
    """Every node of the user's trees."""
    with conn.cursor(row_factory=dict_row) as cur:
        return [_tree_node(row) for row in cur.execute(query("user_tree_nodes"), {"user_id": user_id})]


def tree_nodes(conn: psycopg.Connection, user_id: str, tree_kind: str, tree_key: str) -> list[TreeNode]:
    """One tree of the user, top nodes first."""
    with conn.cursor(row_factory=dict_row) as cur:
        return [_tree_node({**row, "user_id": user_id, "tree_kind": tree_kind, "tree_key": tree_key})
                for row in cur.execute(query("tree_nodes"), {"user_id": user_id, "tree_kind": tree_kind,
                                                             "tree_key": tree_key})]


def tree_written_summaries(conn: psycopg.Connection, tree_kind: str,
                           tree_keys: Sequence[str]) -> dict[tuple[str, str], tuple[str, str]]:
    """(tree, node) -> (what its stored model-written summary was written from, the summary)."""
    return {(tree_key, node_key): (source, summary) for tree_key, node_key, source, summary in conn.execute(
        query("tree_written_summaries"), {"tree_kind": tree_kind, "tree_keys": list(tree_keys)})}


def store_tree(conn: psycopg.Connection, tree_kind: str, tree_keys: Sequence[str], nodes: Sequence[TreeNode],
               run_id: str) -> tuple[int, int]:
    """The trees' nodes as `nodes` say (unchanged ones untouched, the others' gone);
    returns (written, removed)."""
    stored = {(tree_key, node_key): digest for tree_key, node_key, digest in conn.execute(
        query("tree_hashes"), {"tree_kind": tree_kind, "tree_keys": list(tree_keys)})}
    changed = [n for n in nodes if stored.get((n.tree_key, n.node_key)) != n.content_hash]
    written = 0
    if changed:
        with conn.cursor() as cur:
            cur.executemany(query("upsert_tree_node"), [
                {**{f: getattr(n, f) for f in ("user_id", "tree_kind", "tree_key", "node_key", "level", "parent_key",
                                               "position", "started_at", "ended_at", "summary", "model",
                                               "source_hash")},
                 "spans": Jsonb([shallow_fields(s) for s in n.spans]), "keys": list(n.keys),
                 "content_hash": n.content_hash,
                 "run_id": run_id} for n in changed])
            written = cur.rowcount
    removed = conn.execute(query("delete_tree_nodes_except"), {
        "tree_kind": tree_kind, "tree_keys": list(tree_keys), "kept_trees": [n.tree_key for n in nodes],
        "kept_nodes": [n.node_key for n in nodes]}).rowcount
    return written, removed


def refresh_turn_stats(conn: psycopg.Connection, user_ids: Sequence[str]) -> None:
    """BM25's corpus statistics of these users, counted again from their turns."""
    if user_ids:
        conn.execute(query("delete_turn_stats"), {"user_ids": list(user_ids)})
        conn.execute(query("insert_turn_stats"), {"user_ids": list(user_ids)})



def transcript_objects(conn: psycopg.Connection, location: str) -> list[tuple]:
    """The index rows of a transcript location (see migration 0019)."""
    return conn.execute(query("transcript_objects_of"), {"location": location}).fetchall()


def save_transcript_objects(conn: psycopg.Connection, location: str, rows: Sequence[Mapping]) -> None:
    conn.cursor().executemany(query("upsert_transcript_object"), [{"location": location, **row} for row in rows])


def delete_transcript_objects(conn: psycopg.Connection, location: str, names: Sequence[str]) -> None:
    conn.execute(query("delete_transcript_objects"), {"location": location, "names": list(names)})


# --- shards ------------------------------------------------------------------------------

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

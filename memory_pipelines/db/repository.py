"""Repository functions: every read and write of the pipeline's tables goes through here."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict

import psycopg
from psycopg import sql
from psycopg.rows import kwargs_row
from psycopg.types.json import Jsonb

from memory_pipelines.db.queries import query
from memory_pipelines.llm.backends import ModelCall
from memory_pipelines.models import Message, QuarantinedRecord, StoredMessage, Summary, TimeWindow
from memory_pipelines.segments import SessionJudgement
from memory_pipelines.summaries import StoredVersion, SummaryState, SummaryVersion

ARCHIVE_TABLES = ("messages", "sessions", "quarantine")


def lock_transcript_writes(conn: psycopg.Connection) -> None:
    conn.execute(query("lock_transcript_writes"))


def stored_messages(
    conn: psycopg.Connection, session_ids: Sequence[str]
) -> tuple[dict[tuple[str, int], StoredMessage], dict[str, str]]:
    """What the archive holds for these sessions: message hashes by key, and session owners."""
    ids = list(session_ids)
    stored = {
        (sid, seq): StoredMessage(content_hash, user_id)
        for sid, seq, content_hash, user_id in conn.execute(query("stored_messages"), {"session_ids": ids})
    }
    owners = dict(conn.execute(query("session_owners"), {"session_ids": ids}).fetchall())
    return stored, owners


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

def insert_llm_calls(conn: psycopg.Connection, calls: Iterable[ModelCall], *, run_id: str, asset: str,
                     partition_key: str | None, session_id: str | None) -> None:
    rows = [
        {**asdict(c), "run_id": run_id, "asset": asset, "partition_key": partition_key, "session_id": session_id}
        for c in calls
    ]
    if rows:
        with conn.cursor() as cur:
            cur.executemany(query("insert_llm_call"), rows)


# --- messages read back from the archive -------------------------------------------------

def _message_rows(conn: psycopg.Connection, name: str, params: dict) -> list[Message]:
    with conn.cursor(row_factory=kwargs_row(Message)) as cur:
        return cur.execute(query(name), params).fetchall()


def messages_in_window(conn: psycopg.Connection, window: TimeWindow) -> list[Message]:
    """Messages of non-temp sessions sent in the window, by session and seq."""
    return _message_rows(conn, "messages_in_window", {"start": window.start, "end": window.end})


def session_messages_after(conn: psycopg.Connection, session_id: str, after_seq: int | None) -> list[Message]:
    return _message_rows(conn, "session_messages_after",
                         {"session_id": session_id, "after_seq": -1 if after_seq is None else after_seq})


def last_messages(conn: psycopg.Connection, session_id: str, limit: int) -> list[Message]:
    return _message_rows(conn, "last_messages", {"session_id": session_id, "limit": limit})


def sessions_in_window(conn: psycopg.Connection, window: TimeWindow) -> list[tuple[str, str]]:
    return conn.execute(query("sessions_in_window"), {"start": window.start, "end": window.end}).fetchall()


def lock_session(conn: psycopg.Connection, session_id: str) -> None:
    conn.execute(query("lock_session"), {"session_id": session_id})


# --- segments ----------------------------------------------------------------------------

def segment_judgement_current(conn: psycopg.Connection, session_id: str, partition_key: str, fingerprint: str) -> bool:
    """Whether the stored judgement of a session-day was made from these inputs and succeeded."""
    stored, all_ok, distinct = conn.execute(
        query("segment_fingerprint"), {"session_id": session_id, "partition_key": partition_key}).fetchone()
    return stored == fingerprint and bool(all_ok) and distinct == 1


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
            "judge_error": judged.error, "judge_backend": judge[0], "judge_model": judge[1],
            "prompt_version": judge[2], "fingerprint": judgement.fingerprint, "run_id": run_id,
        })
    with conn.cursor() as cur:
        cur.executemany(query("insert_segment"), rows)


def dropped_seqs(conn: psycopg.Connection, session_id: str, partition_key: str) -> frozenset[int]:
    rows = conn.execute(query("dropped_seqs"), {"session_id": session_id, "partition_key": partition_key})
    return frozenset(r[0] for r in rows)


# --- summaries ---------------------------------------------------------------------------

def summary_start_state(conn: psycopg.Connection, session_id: str, first_partition: str) -> SummaryState:
    """The state a fold starting at `first_partition` begins from."""
    row = conn.execute(query("summary_state_before"),
                       {"session_id": session_id, "partition_key": first_partition}).fetchone()
    if row is not None:
        version, summary, cursor_seq, cursor_ts, fingerprint = row
        return SummaryState(Summary.from_json(summary), cursor_seq, cursor_ts, version, fingerprint)
    legacy = conn.execute(query("legacy_summary"), {"session_id": session_id}).fetchone()
    if legacy is not None:
        summary, cursor_seq, cursor_ts = legacy
        return SummaryState(Summary.from_json(summary), cursor_seq, cursor_ts, 0, "legacy")
    return SummaryState()


def summary_versions_from(conn: psycopg.Connection, session_id: str, first_partition: str) -> list[StoredVersion]:
    rows = conn.execute(query("summary_versions_from"), {"session_id": session_id, "partition_key": first_partition})
    return [StoredVersion(v, key, step, count, fp, Summary.from_json(summary), cseq, cts)
            for v, key, step, count, fp, summary, cseq, cts in rows]


def discard_summary_versions(conn: psycopg.Connection, session_id: str, partition_key: str, step: int) -> None:
    conn.execute(query("delete_summary_versions_from"),
                 {"session_id": session_id, "partition_key": partition_key, "step": step})
    conn.execute(query("drop_orphan_current_summary"), {"session_id": session_id})


def insert_summary_version(conn: psycopg.Connection, version: SummaryVersion, run_id: str) -> None:
    row = asdict(version)
    row.update(summary=Jsonb(version.summary.to_json()), trimmed=Jsonb(list(version.trimmed)), run_id=run_id)
    conn.execute(query("insert_summary_version"), row)
    conn.execute(query("refresh_current_summary"), {"session_id": version.session_id})


def refresh_current_summary(conn: psycopg.Connection, session_id: str) -> None:
    conn.execute(query("refresh_current_summary"), {"session_id": session_id})


def current_summary(conn: psycopg.Connection, session_id: str) -> Summary | None:
    row = conn.execute(query("current_summary"), {"session_id": session_id}).fetchone()
    return Summary.from_json(row[0]) if row else None


def session_messages_in_window(conn: psycopg.Connection, session_id: str, window: TimeWindow) -> list[Message]:
    return _message_rows(conn, "session_messages_in_window",
                         {"session_id": session_id, "start": window.start, "end": window.end})


@contextmanager
def session_lock(conn: psycopg.Connection, session_id: str) -> Iterator[None]:
    """Hold the session's advisory lock across several transactions on `conn`."""
    conn.execute(query("lock_session_for_fold"), {"session_id": session_id})
    conn.commit()
    try:
        yield
    finally:
        conn.rollback()
        conn.execute(query("unlock_session_for_fold"), {"session_id": session_id})
        conn.commit()

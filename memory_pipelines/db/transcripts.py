"""The transcript archive: messages, sessions, forks, refused records and the transcript index
(`sql/queries/transcripts.sql`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

import psycopg
from psycopg import sql
from psycopg.rows import class_row, kwargs_row
from psycopg.types.json import Jsonb

from memory_pipelines.db.queries import query
from memory_pipelines.records import ForkPoint, Message, QuarantinedRecord, StoredMessage


ARCHIVE_TABLES = ("messages", "sessions", "quarantine")


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


# copy_messages' column types, in its order: binary COPY sends each value as its type (text
# COPY had psycopg format every row in Python)
_MESSAGE_COLUMN_TYPES = ("text", "int8", "text", "text", "text", "text", "timestamptz", "text", "jsonb", "text",
                         "jsonb", "text", "text", "int8", "text")


def insert_messages(conn: psycopg.Connection, messages: Iterable[Message], run_id: str) -> int:
    count = 0
    with conn.cursor().copy(query("copy_messages")) as copy:
        copy.set_types(_MESSAGE_COLUMN_TYPES)
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


def row_counts(conn: psycopg.Connection, tables: Sequence[str]) -> dict[str, int]:
    template = sql.SQL(query("table_row_count"))
    return {
        table: conn.execute(template.format(table=sql.Identifier(table))).fetchone()[0]
        for table in tables
    }


# --- transcript index --------------------------------------------------------------------

def transcript_objects(conn: psycopg.Connection, location: str) -> list[tuple]:
    """The index rows of a transcript location (see migration 0019)."""
    return conn.execute(query("transcript_objects_of"), {"location": location}).fetchall()


def save_transcript_objects(conn: psycopg.Connection, location: str, rows: Sequence[Mapping]) -> None:
    conn.cursor().executemany(query("upsert_transcript_object"), [{"location": location, **row} for row in rows])


def delete_transcript_objects(conn: psycopg.Connection, location: str, names: Sequence[str]) -> None:
    conn.execute(query("delete_transcript_objects"), {"location": location, "names": list(names)})


def source_table_columns(conn: psycopg.Connection, table: str) -> dict[str, str]:
    """The columns of an agent's own message table or view (its name as SQL writes it): column -> type."""
    return dict(conn.execute(query("source_table_columns"), {"table": table}).fetchall())


def source_table_statement(name: str, table: sql.Identifier, ts: str, session: str, seq: str,
                           watermark: str) -> sql.Composed:
    """One of a source table's named statements (`source_table_*`), its table and columns filled in."""
    return sql.SQL(query(name)).format(
        table=table, ts=sql.Identifier(ts), session=sql.Identifier(session), seq=sql.Identifier(seq),
        watermark=sql.Identifier(watermark))

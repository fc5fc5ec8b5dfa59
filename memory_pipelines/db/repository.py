"""Repository functions: every read and write of the pipeline's tables goes through here."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from memory_pipelines.db.queries import query
from memory_pipelines.models import Message, QuarantinedRecord, StoredMessage

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

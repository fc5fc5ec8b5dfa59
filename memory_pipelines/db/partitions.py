"""The reads and writes of `sql/queries/partitions.sql`."""

from __future__ import annotations

from datetime import date

import psycopg

from memory_pipelines.db.queries import query


def first_transcript_day(conn: psycopg.Connection) -> date | None:
    """The first UTC day of transcripts the database knows (None: it knows none)."""
    (day,), = conn.execute(query("first_transcript_day")).fetchall()
    return day

"""Where the daily partitions start, read once when the assets are imported (the code
location loads, `memory-pipelines run` picks its days):

1. MEMORY_PARTITION_START, when set;
2. else the first transcript day the pipeline's database knows: its earliest stored message,
   or the earliest day of a transcript file it has indexed (`memory-pipelines run` indexes its
   location before the assets are imported, so a backfill of older transcripts finds its days
   there);
3. else FALLBACK_START: no database (MEMORY_DATABASE_URL unset and the embedded server not
   running; loading never starts it), one that does not answer within READ_TIMEOUT_S, one
   not migrated yet, or an empty one.

Never after today (UTC): today's partition always exists. Nothing here imports Dagster, so a
process can settle the start before the assets define their partitions.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, date, datetime
from pathlib import Path

import psycopg

from memory_pipelines.config import default_home, is_set, mask_url, setting
from memory_pipelines.db import embedded
from memory_pipelines.db.queries import query

log = logging.getLogger(__name__)

FALLBACK_START = date(2024, 1, 1)
SETTING = "MEMORY_PARTITION_START"
READ_TIMEOUT_S = 5  # to connect, and for the query: a slow database delays loading by no more


def database_url() -> str | None:
    """The database to read the first day from: MEMORY_DATABASE_URL, else the embedded
    server of MEMORY_HOME when it runs (None when it does not: loading never starts it)."""
    url = setting("MEMORY_DATABASE_URL")
    if url:
        return url
    home = Path(setting("MEMORY_HOME") or default_home())
    if not (embedded.pgdata_dir(home) / "PG_VERSION").exists():
        return None
    return embedded.status(home).url


def first_transcript_day(url: str) -> date | None:
    """The first UTC day of transcripts the database at `url` knows (None: none, or it cannot
    be read: unreachable, not migrated, too slow)."""
    try:
        with psycopg.connect(url, connect_timeout=READ_TIMEOUT_S, autocommit=True,
                             options=f"-c statement_timeout={READ_TIMEOUT_S * 1000}") as conn:
            (day,), = conn.execute(query("first_transcript_day")).fetchall()
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.warning("daily partitions start at %s: the first transcript day could not be read from %s (%s)",
                    FALLBACK_START, mask_url(url), reason)
        return None
    return day


def derived_start(today: date | None = None) -> date:
    """The start when MEMORY_PARTITION_START is unset: the first transcript day the database
    knows, else FALLBACK_START; never after `today` (UTC)."""
    today = today or datetime.now(UTC).date()
    try:
        url = database_url()
    except Exception as exc:  # noqa: BLE001 - an unreadable embedded server must not break loading
        log.warning("daily partitions start at %s: no database to read the first transcript day from (%s)",
                    FALLBACK_START, exc)
        url = None
    first = first_transcript_day(url) if url else None
    return min(first or FALLBACK_START, today)


def partition_start(today: date | None = None) -> date:
    """The first daily partition: MEMORY_PARTITION_START when set, else `derived_start`."""
    return setting(SETTING) if is_set(SETTING) else derived_start(today)


def follow_run(first_day: date | None) -> None:
    """For a process about to run days from `first_day` on, before it imports the assets:
    when MEMORY_PARTITION_START is unset and the derived start is later, the start moves back
    to `first_day` (set in the environment, so that the processes the run starts agree). A
    source the database has not indexed (a postgresql:// table) needs it; a set
    MEMORY_PARTITION_START is left as it is (the run then refuses days before it)."""
    if first_day is not None and not is_set(SETTING) and first_day < derived_start():
        os.environ[SETTING] = first_day.isoformat()


def fixed_start() -> None:
    """For a process that distills into a database of its own (the benchmarks), before it
    imports the assets: the partitions start at FALLBACK_START (or MEMORY_PARTITION_START),
    not at the first day of the pipeline's own database."""
    if not is_set(SETTING):
        os.environ[SETTING] = FALLBACK_START.isoformat()

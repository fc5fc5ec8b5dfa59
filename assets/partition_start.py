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
from dataclasses import replace
from datetime import UTC, date, datetime

import psycopg

from memory_pipelines.config import Settings, mask_url
from memory_pipelines.db import embedded
from memory_pipelines.db import partitions as partitions_db

log = logging.getLogger(__name__)

FALLBACK_START = date(2024, 1, 1)
READ_TIMEOUT_S = 5  # to connect, and for the query: a slow database delays loading by no more


def database_url(settings: Settings) -> str | None:
    """The database to read the first day from: MEMORY_DATABASE_URL, else the embedded
    server of MEMORY_HOME when it runs (None when it does not: loading never starts it)."""
    if settings.database_url:
        return settings.database_url
    home = settings.home
    if not (embedded.pgdata_dir(home) / "PG_VERSION").exists():
        return None
    return embedded.status(home).url


def first_transcript_day(url: str) -> date | None:
    """The first UTC day of transcripts the database at `url` knows (None: none, or it cannot
    be read: unreachable, not migrated, too slow)."""
    try:
        with psycopg.connect(url, connect_timeout=READ_TIMEOUT_S, autocommit=True,
                             options=f"-c statement_timeout={READ_TIMEOUT_S * 1000}") as conn:
            day = partitions_db.first_transcript_day(conn)
    except psycopg.Error as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        log.warning("daily partitions start at %s: the first transcript day could not be read from %s (%s)",
                    FALLBACK_START, mask_url(url), reason)
        return None
    return day


def derived_start(settings: Settings, today: date | None = None) -> date:
    """The start when MEMORY_PARTITION_START is unset: the first transcript day the database
    knows, else FALLBACK_START; never after `today` (UTC)."""
    try:
        url = database_url(settings)
    except Exception as exc:  # noqa: BLE001 - an unreadable embedded server must not break loading
        log.warning("daily partitions start at %s: no database to read the first transcript day from (%s)",
                    FALLBACK_START, exc)
        url = None
    return start_in(url, today)


def start_in(url: str | None, today: date | None = None) -> date:
    """The first transcript day the database at `url` knows, else FALLBACK_START; never
    after `today` (UTC)."""
    first = first_transcript_day(url) if url else None
    return min(first or FALLBACK_START, today or datetime.now(UTC).date())


def partition_start(settings: Settings, today: date | None = None) -> date:
    """The first daily partition: MEMORY_PARTITION_START when set, else `derived_start`."""
    return settings.partition_start or derived_start(settings, today)


def follow_run(settings: Settings, first_day: date | None) -> Settings:
    """The settings of a process about to run days from `first_day` on, before it imports
    the assets: when MEMORY_PARTITION_START is unset and the derived start is later, the
    start moves back to `first_day` (handed to the processes the run starts with the rest). A
    source the database has not indexed (a postgresql:// table) needs it; a set
    MEMORY_PARTITION_START is left as it is (the run then refuses days before it)."""
    if first_day is not None and settings.partition_start is None and first_day < derived_start(settings):
        return replace(settings, partition_start=first_day)
    return settings


def fixed_start(settings: Settings) -> Settings:
    """The settings of a process that distills into a database of its own (the benchmarks),
    before it imports the assets: the partitions start at FALLBACK_START (or
    MEMORY_PARTITION_START), not at the first day of the pipeline's own database."""
    return replace(settings, partition_start=settings.partition_start or FALLBACK_START)

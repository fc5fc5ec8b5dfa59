"""Resources configured from environment variables (see README, Configuration)."""


import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import psycopg

from memory_pipelines.config import SAMPLE_TRANSCRIPTS, default_home
from memory_pipelines.db.connection import get_pool, resolve_url


class PostgresResource(dg.ConfigurableResource):
    """PostgreSQL with pgvector: `database_url`, or the embedded server under `home`."""

    database_url: str | None = None
    home: str = str(default_home())

    def url(self) -> str:
        return resolve_url(self.database_url, Path(self.home))

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        with get_pool(self.url()).connection() as conn:
            yield conn


class TranscriptSource(dg.ConfigurableResource):
    """Where transcript files are read from, and how their records are interpreted."""

    path: str = str(SAMPLE_TRANSCRIPTS)
    timezone: str = "UTC"
    max_message_bytes: int = 1_000_000


def _env_or(name: str, default):
    """An `EnvVar` when the variable is set (so Dagster shows where a value came from)."""
    return dg.EnvVar(name) if os.environ.get(name, "").strip() else default


def resources_from_env() -> dict[str, dg.ConfigurableResource]:
    max_bytes = dg.EnvVar.int("MEMORY_MAX_MESSAGE_BYTES") if os.environ.get("MEMORY_MAX_MESSAGE_BYTES") else 1_000_000
    return {
        "postgres": PostgresResource(
            database_url=_env_or("MEMORY_DATABASE_URL", None),
            home=_env_or("MEMORY_HOME", str(default_home())),
        ),
        "transcript_source": TranscriptSource(
            path=_env_or("MEMORY_TRANSCRIPTS", str(SAMPLE_TRANSCRIPTS)),
            timezone=_env_or("MEMORY_TIMEZONE", "UTC"),
            max_message_bytes=max_bytes,
        ),
    }

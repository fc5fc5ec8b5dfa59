"""Where transcripts come from, chosen by the location's URL (`MEMORY_TRANSCRIPTS`,
`--transcripts`): a local folder or file, an `s3://bucket/prefix` (any S3-compatible endpoint
through `MEMORY_S3_ENDPOINT_URL`), or an agent's own PostgreSQL table
(`postgresql://…?table=NAME`). Every source offers the same `TranscriptSource` interface."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from memory_pipelines.config import SPECS, Settings
from memory_pipelines.formats import FormatOptions
from memory_pipelines.sources.base import Inventory, TranscriptSource
from memory_pipelines.sources.files import PROCESS_INDEX, FileSource, ObjectIndex, ScanSettings


@dataclass(frozen=True)
class SourceSettings:
    """Everything that says where transcripts are and how they are read."""
    location: str = SPECS["MEMORY_TRANSCRIPTS"].default
    timezone: str = SPECS["MEMORY_TIMEZONE"].default
    max_message_bytes: int = SPECS["MEMORY_MAX_MESSAGE_BYTES"].default
    format: str = SPECS["MEMORY_TRANSCRIPT_FORMAT"].default
    fields: dict[str, str] = field(default_factory=dict)
    source_user: str | None = None
    s3_endpoint_url: str | None = None
    columns: dict[str, str] = field(default_factory=dict)
    batch_rows: int = SPECS["MEMORY_SOURCE_BATCH_ROWS"].default
    cache_mb: int = SPECS["MEMORY_TRANSCRIPT_CACHE_MB"].default

    @classmethod
    def from_settings(cls, settings: Settings) -> "SourceSettings":
        return cls(location=settings.transcripts, timezone=settings.timezone,
                   max_message_bytes=settings.max_message_bytes, format=settings.transcript_format,
                   fields=dict(settings.format_fields or {}), source_user=settings.source_user,
                   s3_endpoint_url=settings.s3_endpoint_url, columns=dict(settings.source_columns or {}),
                   batch_rows=settings.source_batch_rows, cache_mb=settings.transcript_cache_mb)

    @property
    def scan(self) -> ScanSettings:
        return ScanSettings(self.timezone, self.max_message_bytes, None if self.format == "auto" else self.format,
                            FormatOptions(dict(self.fields), self.source_user), self.cache_mb * 1024 * 1024)


def open_source(settings: SourceSettings, index: ObjectIndex = PROCESS_INDEX) -> TranscriptSource:
    """The source a location names; `index` keeps what each file holds (files and objects)."""
    scheme = urlsplit(settings.location).scheme
    if scheme == "s3":
        from memory_pipelines.sources.s3 import S3Store

        return FileSource(S3Store(settings.location, settings.s3_endpoint_url), settings.scan, index)
    if scheme in ("postgresql", "postgres"):
        from memory_pipelines.sources.table import TableSource

        return TableSource(settings)
    from memory_pipelines.sources.local import LocalStore

    return FileSource(LocalStore(Path(settings.location)), settings.scan, index)


def inventory_of(location: str) -> Inventory:
    """What a location holds, read with the default settings and this process's index."""
    return open_source(SourceSettings(location=location)).inventory()

"""What every transcript source shares: the objects a folder or a bucket prefix holds, and
the errors that name what to fix."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import date
from typing import Protocol

from memory_pipelines.records import QuarantinedRecord, TimeWindow, TranscriptScan


class TranscriptSourceError(RuntimeError):
    """The transcript location itself cannot be read (not a bad record: those are quarantined)."""


class NotATranscriptFile(TranscriptSourceError):
    """A file named directly is of no kind transcripts come in: nothing is read from it."""


class UnreadableObject(RuntimeError):
    """One listed object could not be read (deleted since listing, denied, a broken
    connection): reported and quarantined, the others are read."""


@dataclass(frozen=True, slots=True)
class SourceObject:
    """One transcript file of a location; `name` is relative to it (what `source_file` says)."""
    name: str
    size: int
    mtime_ns: int
    etag: str | None = None

    @property
    def state(self) -> list:
        """What says the object changed: size, modification time and (object storage) ETag."""
        return [self.size, self.mtime_ns, self.etag]


@dataclass(frozen=True, slots=True)
class ObjectBytes:
    """What reading an object gave: its bytes and, from object storage, the ETag of the
    version read (kept in the index with the object's size and modification time)."""
    data: bytes
    etag: str | None = None


@dataclass(frozen=True)
class Listing:
    """The transcript files under a location, and the files there of no transcript kind."""
    objects: tuple[SourceObject, ...]
    skipped: tuple[str, ...] = ()  # names relative to the location


class ObjectStore(Protocol):
    """A place transcript files are listed and read from: a local folder or file, or an
    object-storage prefix. `location` is the URL or path it was opened with."""

    location: str

    def list_objects(self) -> Listing: ...

    def read(self, obj: SourceObject) -> ObjectBytes:
        """The object's bytes; raises UnreadableObject when it cannot be read."""
        ...


@dataclass(frozen=True)
class Inventory:
    """What a transcript location holds, before anything is written."""
    first_day: date | None  # None: no record has a readable time
    last_day: date | None
    records: int
    refused: int  # refused while reading and validating (more may conflict with the archive)
    undated: int
    days: int = 0  # days with records
    skipped: tuple[str, ...] = ()  # files of no transcript kind, not read


@dataclass(frozen=True)
class ScanPlan:
    """How a source reads a window: the days that hold records, each read on its own so
    memory follows the day, and what refreshing the source's index found. `read` gives a
    day's records as one scan; records no time dates (all refused) come a file at a time."""
    windows: tuple[TimeWindow, ...]
    read: Callable[[TimeWindow], Iterator[TranscriptScan]]
    listed: int = 0  # files or objects listed (a table: 0)
    indexed: tuple[str, ...] = ()  # new or changed since the last scan: read to index them
    gone: tuple[str, ...] = ()  # indexed before, no longer there (their messages stay archived)
    unreadable: tuple[str, ...] = ()  # listed but not readable: quarantined, read again next time
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True)
class Changes:
    """What a sensor tick found: the days new or changed input touches, and the cursor to keep."""
    days: tuple[date, ...]
    cursor: dict
    changed: tuple[str, ...] = ()  # what changed, for the tick's message


class TranscriptSource(Protocol):
    """Where transcripts are read from: `memory_pipelines.sources.open_source` picks one by URL."""

    location: str

    def inventory(self) -> Inventory: ...

    def plan(self, window: TimeWindow, *, include_undated: bool = False) -> ScanPlan: ...

    def undated_records(self) -> Iterator[QuarantinedRecord]: ...

    def changes(self, cursor: dict) -> Changes: ...

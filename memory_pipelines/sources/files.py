"""Transcript files from an object store (a local folder, an `s3://` prefix), in bounded memory.

Each file is scanned once on its own and its index entry kept (`transcript_objects`): its
state (size, modification time, ETag), format, record counts and the UTC days its records
fall on. A window then reads only the files whose days it covers, one day at a time, so
memory follows the largest file and the day, not the location. A file changes: it is
scanned again; a file goes: its entry goes (its archived messages stay).
"""

from __future__ import annotations

import hashlib
import json
import threading
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

import duckdb

from memory_pipelines.db import repository
from memory_pipelines.db.queries import query
from memory_pipelines.formats import FormatOptions, RawRecord, decode_records, detect_format
from memory_pipelines.records import QuarantinedRecord, QuarantineReason, TimeWindow, TranscriptScan
from memory_pipelines.sources.base import (
    Changes, Inventory, Listing, ObjectStore, ScanPlan, SourceObject, UnreadableObject,
)
from memory_pipelines.transcripts import (
    DAY_US, SourcedRecords, day_of, day_window, raw_table, row_to_result, scan_of, to_us, validate,
)


@dataclass(frozen=True)
class ScanSettings:
    """What changes how records are read: a file scanned under other settings is scanned again."""
    timezone: str = "UTC"
    max_bytes: int = 1_000_000
    format: str | None = None  # None: detected per file
    options: FormatOptions = field(default_factory=FormatOptions)

    @property
    def key(self) -> str:
        described = {"timezone": self.timezone, "max_bytes": self.max_bytes, "format": self.format,
                     "fields": dict(sorted(self.options.fields.items())), "user_id": self.options.user_id}
        return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class IndexEntry:
    """What one scan of a file found (a row of `transcript_objects`)."""
    name: str
    size: int
    mtime_ns: int
    etag: str | None
    scan_key: str
    format: str
    records: int
    refused: int
    undated: int
    days: tuple[int, ...]  # UTC day numbers its own times fall on; () when none is readable

    def describes(self, obj: SourceObject, scan_key: str) -> bool:
        return (self.size, self.mtime_ns, self.etag, self.scan_key) == (obj.size, obj.mtime_ns, obj.etag, scan_key)


class ObjectIndex(Protocol):
    """Where index entries are kept: `PostgresIndex` for runs, `MemoryIndex` in-process."""

    def load(self, location: str) -> dict[str, IndexEntry]: ...

    def save(self, location: str, entries: Sequence[IndexEntry]) -> None: ...

    def delete(self, location: str, names: Sequence[str]) -> None: ...


class MemoryIndex:
    """Entries kept for the life of the process (a sensor, tests without a database)."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, IndexEntry]] = {}

    def load(self, location: str) -> dict[str, IndexEntry]:
        return dict(self._entries.get(location, {}))

    def save(self, location: str, entries: Sequence[IndexEntry]) -> None:
        self._entries.setdefault(location, {}).update({e.name: e for e in entries})

    def delete(self, location: str, names: Sequence[str]) -> None:
        for name in names:
            self._entries.get(location, {}).pop(name, None)


class PostgresIndex:
    """Entries in `transcript_objects`, so the next run reads only new or changed files."""

    def __init__(self, pool) -> None:
        self._pool = pool

    def load(self, location: str) -> dict[str, IndexEntry]:
        with self._pool.connection() as conn:
            rows = repository.transcript_objects(conn, location)
        return {row[0]: IndexEntry(*row[:9], tuple(row[9])) for row in rows}

    def save(self, location: str, entries: Sequence[IndexEntry]) -> None:
        if entries:
            with self._pool.connection() as conn, conn.transaction():
                repository.save_transcript_objects(conn, location, [{**asdict(e), "days": list(e.days)}
                                                                    for e in entries])

    def delete(self, location: str, names: Sequence[str]) -> None:
        if names:
            with self._pool.connection() as conn:
                repository.delete_transcript_objects(conn, location, names)


PROCESS_INDEX = MemoryIndex()


@dataclass(frozen=True)
class Catalog:
    """A location after its index was brought up to date."""
    listing: Listing
    entries: dict[str, IndexEntry]  # every readable transcript file, by name
    unreadable: dict[str, SourceObject]  # listed, not readable now: one refused record each
    indexed: tuple[str, ...]
    gone: tuple[str, ...]

    @property
    def location_days(self) -> list[int]:
        return sorted({d for e in self.entries.values() for d in e.days})

    def days_of(self, obj: SourceObject) -> tuple[int, ...]:
        """The days a file's records are attributed to: its own, else the location's day nearest
        its modification time (ties: the earlier), as `scan_records` attributes them."""
        entry = self.entries.get(obj.name)
        if entry is not None and entry.days:
            return entry.days
        days = self.location_days
        if not days:
            return ()
        mtime_day = obj.mtime_ns // 1000 // DAY_US
        i = bisect_left(days, mtime_day)
        near = [d for d in days[max(i - 1, 0):i + 1]]
        return (min(near, key=lambda d: (2 * abs(d - mtime_day) + (d > mtime_day), d)),)


class _Validated:
    """The validated records of the files one window reads, kept while the next window reads
    the same files (a range over a file of many days validates it once)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._con: duckdb.DuckDBPyConnection | None = None

    def rows(self, key: tuple, build, name: str, params: dict) -> list[tuple]:
        with self._lock:
            if key != self._key or self._con is None:
                if self._con is not None:
                    self._con.close()
                # cleared first: a build that fails leaves nothing stale behind
                self._con, self._key = None, None
                self._con, self._key = build(), key
            return self._con.execute(query(name), params).fetchall()


_validated = _Validated()


class FileSource:
    """Transcript files of one object store, read through an index of what each file holds."""

    def __init__(self, store: ObjectStore, settings: ScanSettings = ScanSettings(),
                 index: ObjectIndex = PROCESS_INDEX) -> None:
        self.store = store
        self.location = store.location
        self.settings = settings
        self.index = index

    # -- reading files

    def _records(self, obj: SourceObject, data: bytes | None, problem: str | None) -> tuple[str, list[RawRecord]]:
        if problem is not None:
            # line 0 stands for "the file"
            return "unreadable", [RawRecord(0, "", obj.size, QuarantineReason.UNREADABLE_FILE, problem)]
        fmt = self.settings.format or detect_format(obj.name, data)
        return fmt, list(decode_records(obj.name, data, fmt, self.settings.options))

    def _read(self, obj: SourceObject) -> tuple[str, list[RawRecord]]:
        try:
            return self._records(obj, self.store.read(obj), None)
        except UnreadableObject as exc:
            return self._records(obj, None, str(exc))

    def _validated(self, objects: Sequence[SourceObject], location_days: Sequence[int]) -> duckdb.DuckDBPyConnection:
        batches = (SourcedRecords(obj.name, obj.mtime_ns // 1000, self._read(obj)[1]) for obj in objects)
        return validate(raw_table(batches), timezone=self.settings.timezone, max_bytes=self.settings.max_bytes,
                        location_days=location_days)

    # -- the index

    def _scan_alone(self, obj: SourceObject) -> IndexEntry | None:
        """The index entry of one file, read and validated on its own; None when unreadable."""
        try:
            data = self.store.read(obj)
        except UnreadableObject:
            return None
        fmt, records = self._records(obj, data, None)
        con = validate(raw_table([SourcedRecords(obj.name, obj.mtime_ns // 1000, records)]),
                       timezone=self.settings.timezone, max_bytes=self.settings.max_bytes)
        try:
            (count, refused, undated, days), = con.execute(query("file_summary")).fetchall()
        finally:
            con.close()
        return IndexEntry(obj.name, obj.size, obj.mtime_ns, obj.etag, self.settings.key, fmt,
                          count, refused, undated, tuple(days))

    def catalog(self) -> Catalog:
        """List the location and bring the index up to date: only new or changed files are read."""
        listing = self.store.list_objects()
        known = self.index.load(self.location)
        entries, unreadable, fresh = {}, {}, []
        for obj in listing.objects:
            entry = known.get(obj.name)
            if entry is None or not entry.describes(obj, self.settings.key):
                entry = self._scan_alone(obj)
                if entry is None:
                    unreadable[obj.name] = obj
                    continue
                fresh.append(entry)
            entries[obj.name] = entry
        listed = {obj.name for obj in listing.objects}
        gone = tuple(sorted(name for name in known if name not in listed))
        self.index.save(self.location, fresh)
        self.index.delete(self.location, [*gone, *unreadable])
        return Catalog(listing, entries, unreadable, tuple(e.name for e in fresh), gone)

    # -- what a source offers

    def plan(self, window: TimeWindow, *, include_undated: bool = False) -> ScanPlan:
        catalog = self.catalog()
        objects = {obj.name: obj for obj in catalog.listing.objects}
        by_day: dict[int, list[SourceObject]] = {}
        for obj in objects.values():
            for day in catalog.days_of(obj):
                by_day.setdefault(day, []).append(obj)
        location_days = catalog.location_days
        first, last = to_us(window.start) // DAY_US, (to_us(window.end) - 1) // DAY_US
        if include_undated and not location_days:
            # nothing in the location has a readable time: every record is undated, the run's own
            windows = (window,) if objects else ()
            groups = {window: list(objects.values())}
        else:
            days = [d for d in sorted(by_day) if first <= d <= last]
            windows = tuple(day_window(window, d) for d in days)
            groups = {w: by_day[d] for w, d in zip(windows, days)}

        def read(w: TimeWindow) -> TranscriptScan:
            chosen = sorted(groups[w], key=lambda o: o.name)
            key = (self.location, self.settings.key, tuple(location_days),
                   tuple((o.name, *o.state) for o in chosen))
            rows = _validated.rows(key, lambda: self._validated(chosen, location_days), "window_records",
                                   {"start_us": to_us(w.start), "end_us": to_us(w.end), "undated": include_undated})
            return scan_of(w, rows, len(chosen), catalog.listing.skipped)

        return ScanPlan(windows, read, listed=len(objects), indexed=catalog.indexed, gone=catalog.gone,
                        unreadable=tuple(sorted(catalog.unreadable)), skipped=catalog.listing.skipped)

    def inventory(self) -> Inventory:
        catalog = self.catalog()
        days = catalog.location_days
        entries = catalog.entries.values()
        records = sum(e.records for e in entries) + len(catalog.unreadable)
        return Inventory(day_of(days[0]) if days else None, day_of(days[-1]) if days else None,
                         records, sum(e.refused for e in entries) + len(catalog.unreadable),
                         0 if days else records, len(days), catalog.listing.skipped)

    def undated_records(self) -> list[QuarantinedRecord]:
        """The records no readable time dates (there are any only when no file has one)."""
        catalog = self.catalog()
        if catalog.location_days:
            return []
        con = self._validated(catalog.listing.objects, ())
        try:
            return [row_to_result(row) for row in con.execute(query("undated_records")).fetchall()]
        finally:
            con.close()

    def changes(self, cursor: dict) -> Changes:
        """The days of the files new or changed since `cursor` (name → state)."""
        catalog = self.catalog()
        current = {obj.name: obj.state for obj in catalog.listing.objects}
        changed = tuple(sorted(name for name, state in current.items() if cursor.get(name) != state))
        objects = {obj.name: obj for obj in catalog.listing.objects}
        days = {d for name in changed for d in catalog.days_of(objects[name])}
        return Changes(tuple(day_of(d) for d in sorted(days)), current, changed)


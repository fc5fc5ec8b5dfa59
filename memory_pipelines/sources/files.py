"""Transcript files from an object store (a local folder, an `s3://` prefix), in bounded memory.

Each file is read once to index it (small files validated together, up to SCAN_BATCH_BYTES
a pass) and its index entry kept (`transcript_objects`): its state (size, modification time,
ETag), format, record counts and the UTC days its records fall on. A window then reads only
the files whose days it covers, one day at a time, so memory follows the largest file, the
day and `MEMORY_TRANSCRIPT_CACHE_MB`, not the location. A file changes: it is scanned again;
a file goes: its entry goes (its archived messages stay).
"""

from __future__ import annotations

import itertools
import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Protocol

import duckdb

from memory_pipelines.config import SPECS
from memory_pipelines.db import transcripts as transcripts_db
from memory_pipelines.db.queries import query
from memory_pipelines.digests import json_digest
from memory_pipelines.formats import FormatOptions, RawRecord, decode_records, detect_format
from memory_pipelines.records import QuarantinedRecord, QuarantineReason, TimeWindow, TranscriptScan
from memory_pipelines.sources.base import (
    Changes, Inventory, Listing, ObjectStore, ScanPlan, SourceObject, UnreadableObject,
)
from memory_pipelines.core.transcript_scan import (
    DAY_US, SourcedRecords, day_of, day_window, is_skipped_event, raw_table, row_to_result, scan_of, to_us, validate,
)


@dataclass(frozen=True)
class ScanSettings:
    """What changes how records are read: a file scanned under other settings is scanned again."""
    timezone: str = "UTC"
    max_bytes: int = 1_000_000
    format: str | None = None  # None: detected per file
    options: FormatOptions = field(default_factory=FormatOptions)
    # files kept validated for a run's later days, by their size (not in `key`: records read alike)
    cache_bytes: int = SPECS["MEMORY_TRANSCRIPT_CACHE_MB"].default * 1024 * 1024

    @property
    def key(self) -> str:
        described = {"timezone": self.timezone, "max_bytes": self.max_bytes, "format": self.format,
                     "fields": dict(sorted(self.options.fields.items())), "user_id": self.options.user_id}
        return json_digest(described, sort_keys=True)[:16]


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
        # a listing without ETags (a folder; S3 through pyarrow) compares size and time
        return ((self.size, self.mtime_ns, self.scan_key) == (obj.size, obj.mtime_ns, scan_key)
                and obj.etag in (None, self.etag))


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
            rows = transcripts_db.transcript_objects(conn, location)
        return {row[0]: IndexEntry(*row[:9], tuple(row[9])) for row in rows}

    def save(self, location: str, entries: Sequence[IndexEntry]) -> None:
        if entries:
            with self._pool.connection() as conn, conn.transaction():
                transcripts_db.save_transcript_objects(conn, location, [{**asdict(e), "days": list(e.days)}
                                                                        for e in entries])

    def delete(self, location: str, names: Sequence[str]) -> None:
        if names:
            with self._pool.connection() as conn:
                transcripts_db.delete_transcript_objects(conn, location, names)


PROCESS_INDEX = MemoryIndex()
# new files read to index them are validated together up to this many bytes of files
SCAN_BATCH_BYTES = 8 * 1024 * 1024
# a window no record falls in: reads only what no time dates
_EMPTY = TimeWindow(datetime(1970, 1, 1, tzinfo=UTC), datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC))


@dataclass(frozen=True)
class Catalog:
    """A location after its index was brought up to date."""
    listing: Listing
    entries: dict[str, IndexEntry]  # every readable transcript file, by name
    unreadable: dict[str, SourceObject]  # listed, not readable now: one refused record each
    indexed: tuple[str, ...]
    gone: tuple[str, ...]

    @cached_property  # asked once per file a window reads
    def location_days(self) -> list[int]:
        return sorted({d for e in self.entries.values() for d in e.days})

    def dating(self, obj: SourceObject) -> Sequence[int]:
        """The location days that date a file's records: none for a file with times of its
        own (its validation does not depend on them)."""
        entry = self.entries.get(obj.name)
        return () if entry is not None and entry.days else self.location_days

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


class _ValidatedFiles:
    """Validated files kept for the next windows that read them (a range over files of many
    days validates each once): a batch of files validated together is one DuckDB connection,
    least recently used batch first out, up to `budget` bytes of files, so memory stays
    bounded by the budget and the largest batch, whatever the location holds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: OrderedDict[int, tuple[duckdb.DuckDBPyConnection, int, tuple[tuple, ...]]] = OrderedDict()
        self._batch_of: dict[tuple, int] = {}  # file key -> its batch
        self._ids = itertools.count()

    def rows(self, files: Sequence[tuple[tuple, str]], params: dict) -> dict[str, list[tuple]]:
        """The records in the window (`params`) of the files kept, by name, of (key, name)
        pairs; one query per batch."""
        with self._lock:
            by_batch: dict[int, list[str]] = {}
            for key, name in files:
                if (batch := self._batch_of.get(key)) is not None:
                    by_batch.setdefault(batch, []).append(name)
            found: dict[str, list[tuple]] = {name: [] for names in by_batch.values() for name in names}
            for batch, names in by_batch.items():
                self._batches.move_to_end(batch)
                for row in window_rows(self._batches[batch][0], names, params):
                    found[row[0]].append(row)
            return found

    def keep(self, con: duckdb.DuckDBPyConnection, keys: Sequence[tuple], size: int, budget: int) -> None:
        """Keep a batch of validated files (`keys`, `size` bytes of files); older batches go
        while the kept ones exceed `budget` bytes of files (the newest stays, whatever its size)."""
        with self._lock:
            for key in keys:  # a file validated again leaves its older batch's copy unused
                self._batch_of.pop(key, None)
            batch = next(self._ids)
            self._batches[batch] = (con, size, tuple(keys))
            self._batch_of.update((key, batch) for key in keys)
            while len(self._batches) > 1 and sum(s for _, s, _ in self._batches.values()) > budget:
                _, (old, _, old_keys) = self._batches.popitem(last=False)
                old.close()
                for key in old_keys:
                    if self._batch_of.get(key) is not None and self._batch_of[key] not in self._batches:
                        del self._batch_of[key]


_validated = _ValidatedFiles()


def window_rows(con: duckdb.DuckDBPyConnection, names: Sequence[str], params: dict) -> list[tuple]:
    """The records in the window (`params`) of some files of a validated batch, by file and line."""
    return con.execute(query("window_records_of"), {**params, "sources": list(names)}).fetchall()


class FileSource:
    """Transcript files of one object store, read through an index of what each file holds."""

    def __init__(self, store: ObjectStore, settings: ScanSettings = ScanSettings(),
                 index: ObjectIndex = PROCESS_INDEX) -> None:
        self.store = store
        self.location = store.location
        self.settings = settings
        self.index = index

    # -- reading files

    def _read(self, obj: SourceObject) -> tuple[str, list[RawRecord], str | None]:
        """A file's format, raw records and ETag; raises UnreadableObject."""
        read = self.store.read(obj)
        fmt = self.settings.format or detect_format(obj.name, read.data)
        return fmt, list(decode_records(obj.name, read.data, fmt, self.settings.options)), read.etag

    def _validate(self, files: Sequence[tuple[SourceObject, list[RawRecord]]],
                  location_days: Sequence[int] = ()) -> duckdb.DuckDBPyConnection:
        """Files validated together, in one pass (a pass costs tens of milliseconds whatever
        its size, so small files go in batches)."""
        return validate(raw_table([SourcedRecords(obj.name, obj.mtime_ns // 1000, records) for obj, records in files]),
                        timezone=self.settings.timezone, max_bytes=self.settings.max_bytes,
                        location_days=location_days)

    def _key(self, obj: SourceObject, location_days: Sequence[int]) -> tuple:
        """What a file's validated records depend on: the file, the settings and, for a file
        without a readable time of its own, the location's days that date it."""
        return (self.location, self.settings.key, obj.name, *obj.state, tuple(location_days))

    # -- the index

    def _scan(self, objects: Sequence[SourceObject],
              keep: TimeWindow | None) -> Iterator[tuple[list[IndexEntry], list[SourceObject]]]:
        """The index entries of files, each read on its own and validated in batches of up to
        SCAN_BATCH_BYTES, a batch at a time with the files that could not be read. A batch
        holding days of `keep` stays validated for the windows that read it next."""
        batch: list[tuple[SourceObject, str, list[RawRecord], str | None]] = []
        unreadable: list[SourceObject] = []
        size = 0
        for position, obj in enumerate(objects):
            try:
                batch.append((obj, *self._read(obj)))
                size += obj.size
            except UnreadableObject:
                unreadable.append(obj)
            if position == len(objects) - 1 or size >= SCAN_BATCH_BYTES:
                yield (self._scan_batch(batch, keep) if batch else []), unreadable
                batch, unreadable, size = [], [], 0

    def _scan_batch(self, batch: Sequence[tuple[SourceObject, str, list[RawRecord], str | None]],
                    keep: TimeWindow | None) -> list[IndexEntry]:
        con = self._validate([(obj, records) for obj, _, records, _ in batch])
        found = {source: rest for source, *rest in con.execute(query("file_summaries")).fetchall()}
        entries = []
        for obj, fmt, _, etag in batch:
            count, refused, undated, days = found.get(obj.name, (0, 0, 0, []))  # an empty file has no row
            entries.append(IndexEntry(obj.name, obj.size, obj.mtime_ns, etag or obj.etag, self.settings.key, fmt,
                                      count, refused, undated, tuple(days)))
        first, last = (to_us(keep.start) // DAY_US, (to_us(keep.end) - 1) // DAY_US) if keep else (1, 0)
        if any(first <= day <= last for entry in entries for day in entry.days):
            _validated.keep(con, [self._key(obj, ()) for obj, *_ in batch], sum(obj.size for obj, *_ in batch),
                            self.settings.cache_bytes)
        else:
            con.close()
        return entries

    def catalog(self, keep: TimeWindow | None = None) -> Catalog:
        """List the location and bring the index up to date: only new or changed files are
        read; those holding days of `keep` (the window a plan reads next) stay validated."""
        listing = self.store.list_objects()
        known = self.index.load(self.location)
        current = {obj.name: known[obj.name] for obj in listing.objects
                   if obj.name in known and known[obj.name].describes(obj, self.settings.key)}
        unreadable, fresh = {}, []
        for scanned, failed in self._scan([obj for obj in listing.objects if obj.name not in current], keep):
            # saved a batch at a time: a scan of a large new location cut short (a sensor
            # tick's time limit, a stopped run) keeps what it read
            self.index.save(self.location, scanned)
            fresh.extend(scanned)
            current |= {entry.name: entry for entry in scanned}
            unreadable |= {obj.name: obj for obj in failed}
        entries = {obj.name: current[obj.name] for obj in listing.objects if obj.name in current}
        listed = {obj.name for obj in listing.objects}
        gone = tuple(sorted(name for name in known if name not in listed))
        self.index.delete(self.location, [*gone, *unreadable])
        return Catalog(listing, entries, unreadable, tuple(e.name for e in fresh), gone)

    # -- what a source offers

    def plan(self, window: TimeWindow, *, include_undated: bool = False) -> ScanPlan:
        catalog = self.catalog(keep=window)
        objects = catalog.listing.objects
        undated = include_undated and not catalog.location_days
        if undated:
            # nothing in the location has a readable time: every record is undated, the run's own
            groups = {window: list(objects)} if objects else {}
        else:
            first, last = to_us(window.start) // DAY_US, (to_us(window.end) - 1) // DAY_US
            by_day: dict[int, list[SourceObject]] = {}
            for obj in objects:
                for day in catalog.days_of(obj):
                    if first <= day <= last:
                        by_day.setdefault(day, []).append(obj)
            groups = {day_window(window, d): by_day[d] for d in sorted(by_day)}

        refused: set[str] = set()  # files found unreadable: quarantined once, in the first window reading them
        ahead: dict[TimeWindow, dict[str, list[tuple]]] = {}  # the next days' rows of kept files, read at once

        def read(w: TimeWindow) -> Iterator[TranscriptScan]:
            # a day's files are one scan (a fork's parent may be in another file of the day),
            # in name order (as records are ordered); undated records (every one refused) a
            # scan per file
            if not undated and w not in ahead:
                ahead.update(self._read_ahead(groups, w, catalog))
            for batch in ([[obj] for obj in groups[w]] if undated else [groups[w]]):
                rows, unreadable = self._rows_of(batch, catalog, w, undated, ahead.pop(w, {}))
                fresh = [r for r in unreadable if r.source_file not in refused]
                refused.update(r.source_file for r in fresh)
                yield scan_of(w, rows, len(batch), catalog.listing.skipped, fresh)

        return ScanPlan(tuple(groups), read, listed=len(objects), indexed=catalog.indexed, gone=catalog.gone,
                        unreadable=tuple(sorted(catalog.unreadable)), skipped=catalog.listing.skipped)

    def inventory(self) -> Inventory:
        catalog = self.catalog()
        days = catalog.location_days
        entries = catalog.entries.values()
        records = sum(e.records for e in entries) + len(catalog.unreadable)
        return Inventory(day_of(days[0]) if days else None, day_of(days[-1]) if days else None,
                         records, sum(e.refused for e in entries) + len(catalog.unreadable),
                         0 if days else records, len(days), catalog.listing.skipped)

    def undated_records(self) -> Iterator[QuarantinedRecord]:
        """The records no readable time dates (there are any only when no file has one), a
        file at a time."""
        catalog = self.catalog()
        if catalog.location_days:
            return
        for obj in catalog.listing.objects:
            rows, unreadable = self._rows_of([obj], catalog, _EMPTY, True)
            yield from (row_to_result(row) for row in rows if not is_skipped_event(row))
            yield from unreadable

    def _read_ahead(self, groups: Mapping[TimeWindow, Sequence[SourceObject]], first: TimeWindow,
                    catalog: Catalog) -> dict[TimeWindow, dict[str, list[tuple]]]:
        """The rows of the days from `first` on whose files stay validated, up to
        SCAN_BATCH_BYTES of files, in one query a batch: a long range of small days is not a
        query a day (file -> its rows of the day, each day's files kept validated)."""
        windows = list(groups)
        block, names, size = [], {}, 0
        for w in windows[windows.index(first):]:
            fresh = [obj for obj in groups[w] if obj.name not in names]
            if block and size + sum(obj.size for obj in fresh) > SCAN_BATCH_BYTES:
                break
            block.append(w)
            names |= {obj.name: self._key(obj, catalog.dating(obj)) for obj in fresh}
            size += sum(obj.size for obj in fresh)
        params = {"start_us": to_us(block[0].start), "end_us": to_us(block[-1].end), "undated": False}
        found = _validated.rows([(key, name) for name, key in names.items()], params)
        by_day: dict[int, dict[str, list[tuple]]] = {to_us(w.start) // DAY_US: {} for w in block}
        for name, rows in found.items():
            for row in rows:  # a day with no file of its own in the plan is read by none, as day by day
                if (day := by_day.get(row[-1] // DAY_US)) is not None:  # the last column: event_us
                    day.setdefault(name, []).append(row)
        return {w: {obj.name: by_day[to_us(w.start) // DAY_US].get(obj.name, []) for obj in groups[w]
                    if obj.name in found} for w in block}

    def _rows_of(self, objects: Sequence[SourceObject], catalog: Catalog, window: TimeWindow,
                 undated: bool, known: Mapping[str, list[tuple]] | None = None,
                 ) -> tuple[list[tuple], list[QuarantinedRecord]]:
        """The validated rows of files in the window, in file order, and a refused record for
        each file that cannot be read now (a failed read is never kept: the next window or
        run reads the file again). `known`: rows read ahead, by file. Files not kept
        validated are read and validated together."""
        params = {"start_us": to_us(window.start), "end_us": to_us(window.end), "undated": undated}
        keys = {obj.name: self._key(obj, catalog.dating(obj)) for obj in objects}
        found = dict(known or {})
        found |= _validated.rows([(keys[obj.name], obj.name) for obj in objects if obj.name not in found], params)
        missing: list[tuple[SourceObject, list[RawRecord]]] = []
        unreadable: list[QuarantinedRecord] = []
        for obj in objects:
            if obj.name in found:
                continue
            try:
                missing.append((obj, self._read(obj)[1]))
            except UnreadableObject as exc:
                unreadable.append(QuarantinedRecord(obj.name, 0, QuarantineReason.UNREADABLE_FILE, str(exc), "",
                                                    obj.size))
        if missing:
            # a dated file validates the same with the location's days: one pass for all
            con = self._validate(missing, catalog.location_days)
            names = [obj.name for obj, _ in missing]
            found |= {name: [] for name in names}
            for row in window_rows(con, names, params):
                found[row[0]].append(row)
            _validated.keep(con, [keys[name] for name in names], sum(obj.size for obj, _ in missing),
                            self.settings.cache_bytes)
        return [row for obj in objects for row in found.get(obj.name, ())], unreadable

    def changes(self, cursor: dict) -> Changes:
        """The days of the files new or changed since `cursor` (name → state)."""
        catalog = self.catalog()
        current = {obj.name: obj.state for obj in catalog.listing.objects}
        changed = tuple(sorted(name for name, state in current.items() if cursor.get(name) != state))
        objects = {obj.name: obj for obj in catalog.listing.objects}
        days = {d for name in changed for d in catalog.days_of(objects[name])}
        return Changes(tuple(day_of(d) for d in sorted(days)), current, changed)

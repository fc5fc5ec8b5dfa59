"""Reading transcript files with DuckDB: JSON Lines, Parquet and `.json` arrays of messages
(such as the per-session `history.json`).

Every record becomes (source, line, raw JSON text); byte-level faults (invalid UTF-8, NUL
bytes) are caught here, everything else (JSON validity, fields, types, roles, time zones,
the partition window) by one DuckDB query, `scan_records` in `sql/queries/transcript_scan.sql`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from collections.abc import Iterator, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from memory_pipelines.db.queries import query
from memory_pipelines.records import Message, QuarantinedRecord, QuarantineReason, TimeWindow, TranscriptScan

JSONL_SUFFIXES = (".jsonl", ".ndjson")
ACCEPTED_KINDS = ".jsonl or .ndjson (JSON Lines), .parquet, or .json such as history.json (a JSON array of messages)"
RAW_CAP = 4000
SKIPPED_SHOWN = 10
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class TranscriptSourceError(RuntimeError):
    """The transcript location itself cannot be read (not a bad record: those are quarantined)."""


class NotATranscriptFile(TranscriptSourceError):
    """A file named directly is of no kind transcripts come in: nothing is read from it."""


def transcript_kind(path: Path) -> str | None:
    """How a file is read: `jsonl`, `parquet` or `json` (an array of messages); None: not a transcript."""
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    return {".parquet": "parquet", ".json": "json"}.get(suffix)


@dataclass(frozen=True)
class Discovery:
    """The transcript files under a location, and the files there of no transcript kind."""
    files: tuple[Path, ...]
    skipped: tuple[str, ...] = ()  # paths relative to the folder


def describe_skipped(skipped: Sequence[str]) -> str:
    """One line for the files of no transcript kind a folder held: how many, the first ten."""
    shown = ", ".join(skipped[:SKIPPED_SHOWN])
    more = f" and {len(skipped) - SKIPPED_SHOWN} more" if len(skipped) > SKIPPED_SHOWN else ""
    return f"{len(skipped)} file(s) of no transcript kind skipped: {shown}{more} (accepted: {ACCEPTED_KINDS})"


@dataclass(frozen=True, slots=True)
class _RawRecord:
    source: str
    line: int
    raw: str
    raw_bytes: int
    pre_reason: str | None
    pre_detail: str | None
    file_mtime_us: int


def _decode_line(data: bytes) -> tuple[str, str | None, str | None]:
    """Text of one record plus a byte-level fault, if any. The text stays parseable so
    the record's time can still be read for attributing it to a partition."""
    nul = data.find(b"\x00")
    if nul >= 0:
        text = data.replace(b"\x00", b"").decode("utf-8", "replace")
        return text, QuarantineReason.NUL_BYTE, f"NUL byte at offset {nul}"
    try:
        return data.decode("utf-8"), None, None
    except UnicodeDecodeError as exc:
        return data.decode("utf-8", "replace"), QuarantineReason.INVALID_UTF8, f"invalid UTF-8 at byte {exc.start}"


def _jsonl_records(path: Path, source: str, mtime_us: int) -> Iterator[_RawRecord]:
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    for number, line in enumerate(data.split(b"\n"), start=1):
        line = line.rstrip(b"\r")
        if not line.strip():
            continue
        text, reason, detail = _decode_line(line)
        yield _RawRecord(source, number, text, len(line), reason, detail, mtime_us)


def _json_array_records(path: Path, source: str, mtime_us: int) -> Iterator[_RawRecord]:
    data = path.read_bytes()
    text, reason, detail = _decode_line(data)
    if reason is None:
        try:
            items = json.loads(text)
        except json.JSONDecodeError as exc:
            reason, detail = QuarantineReason.MALFORMED_JSON, f"not a valid JSON array: {exc.msg} at line {exc.lineno}"
        else:
            if not isinstance(items, list):
                reason, detail = QuarantineReason.NOT_AN_OBJECT, "a .json transcript must hold a JSON array of messages"
    if reason is not None:
        # The whole file is one refused record: line 0 stands for "the file".
        yield _RawRecord(source, 0, text, len(data), reason, detail, mtime_us)
        return
    for number, item in enumerate(items, start=1):
        raw = json.dumps(item, ensure_ascii=False)
        yield _RawRecord(source, number, raw, len(raw.encode()), None, None, mtime_us)


def _parquet_records(con: duckdb.DuckDBPyConnection, path: Path, source: str, mtime_us: int) -> Iterator[_RawRecord]:
    try:
        rows = con.execute(query("scan_parquet_rows"), {"path": str(path)}).fetchall()
    except duckdb.Error as exc:
        yield _RawRecord(source, 0, "", path.stat().st_size, QuarantineReason.UNREADABLE_FILE,
                         f"cannot read Parquet file: {str(exc).splitlines()[0]}", mtime_us)
        return
    for number, raw in rows:
        yield _RawRecord(source, int(number), raw, len(raw.encode()), None, None, mtime_us)


def discover_files(con: duckdb.DuckDBPyConnection, root: Path) -> Discovery:
    """Transcript files under `root`, sorted, and the other files there (skipped, listed).
    A file named directly must be of a transcript kind: anything else is refused whole."""
    if root.is_file():
        if transcript_kind(root) is None:
            raise NotATranscriptFile(f"{root} is not a transcript file: accepted are {ACCEPTED_KINDS}")
        return Discovery((root,))
    if not root.is_dir():
        raise TranscriptSourceError(f"transcript path does not exist: {root}")
    found = [Path(row[0]) for row in con.execute(query("scan_glob"), {"pattern": str(root / "**" / "*")}).fetchall()]
    return Discovery(tuple(f for f in found if transcript_kind(f) is not None),
                     tuple(f.relative_to(root).as_posix() for f in found if transcript_kind(f) is None))


def _read_raw(con: duckdb.DuckDBPyConnection, root: Path, files: list[Path]) -> pa.Table:
    base = root if root.is_dir() else root.parent
    records: list[_RawRecord] = []
    for path in files:
        source = path.relative_to(base).as_posix()
        mtime_us = int(path.stat().st_mtime * 1_000_000)
        kind = transcript_kind(path)
        if kind == "jsonl":
            records.extend(_jsonl_records(path, source, mtime_us))
        elif kind == "parquet":
            records.extend(_parquet_records(con, path, source, mtime_us))
        else:
            records.extend(_json_array_records(path, source, mtime_us))
    columns = ("source", "line", "raw", "raw_bytes", "pre_reason", "pre_detail", "file_mtime_us")
    types = (pa.string(), pa.int64(), pa.string(), pa.int64(), pa.string(), pa.string(), pa.int64())
    return pa.table(
        {name: pa.array([getattr(r, name) for r in records], type=t) for name, t in zip(columns, types)}
    )


def _to_us(moment: datetime) -> int:
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def hash_message(fields: dict[str, Any]) -> str:
    """sha256 over a message's fields except its key: equal hashes mean a re-sent message."""
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


class _ValidatedCache:
    """The validated records of one transcript folder, kept in an in-memory DuckDB table.

    A run over many partitions scans the files once; any change to the files (their list,
    sizes or modification times) or to the settings rebuilds it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple | None = None
        self._con: duckdb.DuckDBPyConnection | None = None
        self.discovery = Discovery(())

    def query(self, root: Path, timezone: str, max_bytes: int, name: str, params: dict) -> list[tuple]:
        with self._lock:
            probe = duckdb.connect()
            try:
                discovery = discover_files(probe, root)
            finally:
                probe.close()
            stats = [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in discovery.files]
            key = (str(root), timezone, max_bytes, tuple(stats))
            if key != self._key or self._con is None:
                self._rebuild(root, list(discovery.files), timezone, max_bytes)
                self._key = key
            self.discovery = discovery
            return self._con.execute(query(name), params).fetchall()

    def _rebuild(self, root: Path, files: list[Path], timezone: str, max_bytes: int) -> None:
        if self._con is not None:
            self._con.close()
        self._con = con = duckdb.connect()
        # Times written without a zone are read in the configured zone.
        con.execute("SET TimeZone = $tz", {"tz": timezone})
        con.register("raw_records", _read_raw(con, root, files))
        con.execute(query("scan_records"), {"max_bytes": max_bytes})
        con.unregister("raw_records")


_cache = _ValidatedCache()


def _strip_nul(text: str) -> str:
    return text.replace("\x00", "")


def _row_to_result(row: tuple) -> Message | QuarantinedRecord:
    (source, line, raw_bytes, reason, detail, raw, session_id, user_id, seq, role, content,
     ts_us, agent_id, tool_name, tool_call_id, tool_args, metadata, parent_session_id, fork_seq, _event_us) = row
    if reason is not None:
        # PostgreSQL text cannot hold NUL; the refused record keeps everything else.
        return QuarantinedRecord(
            source, line, QuarantineReason(reason), _strip_nul(detail), _strip_nul(raw), raw_bytes,
            _strip_nul(session_id) if session_id is not None else None, seq,
        )
    args = json.loads(tool_args) if tool_args is not None else None
    meta = json.loads(metadata) if metadata is not None else {}
    fields = {"user_id": user_id, "role": role, "content": content, "ts_us": ts_us, "agent_id": agent_id,
              "tool_name": tool_name, "tool_args": args, "tool_call_id": tool_call_id, "metadata": meta}
    if parent_session_id is not None:
        # only a fork's hash holds its fork point (every other message's hash is as before)
        fields |= {"parent_session_id": parent_session_id, "fork_seq": fork_seq}
    return Message(
        session_id=session_id, seq=seq, user_id=user_id, role=role, content=content, ts=_from_us(ts_us),
        content_hash=hash_message(fields), source_file=source, source_line=line, agent_id=agent_id,
        tool_name=tool_name, tool_args=args, tool_call_id=tool_call_id, metadata=meta,
        parent_session_id=parent_session_id, fork_seq=fork_seq,
    )


def scan_transcripts(root: Path, window: TimeWindow, *, timezone: str = "UTC", max_bytes: int = 1_000_000,
                     include_undated: bool = False) -> TranscriptScan:
    """Every record under `root` whose event time falls in `window`, validated; with
    `include_undated`, also the records no readable time dates (the run's own range takes
    them: only a location without a single readable time has any)."""
    rows = _cache.query(root, timezone, max_bytes, "window_records",
                        {"start_us": _to_us(window.start), "end_us": _to_us(window.end), "undated": include_undated})
    results = [_row_to_result(row) for row in rows]
    return TranscriptScan(
        window=window,
        messages=tuple(r for r in results if isinstance(r, Message)),
        quarantined=tuple(r for r in results if isinstance(r, QuarantinedRecord)),
        files=len(_cache.discovery.files),
        skipped_files=_cache.discovery.skipped,
    )


@dataclass(frozen=True)
class Inventory:
    """What a transcript location holds, before anything is written."""
    first_day: date | None  # None: no record has a readable time
    last_day: date | None
    records: int
    refused: int  # refused while reading and validating (more may conflict with the archive)
    undated: int
    discovery: Discovery


def transcript_inventory(root: Path, *, timezone: str = "UTC", max_bytes: int = 1_000_000) -> Inventory:
    (first, last), = _cache.query(root, timezone, max_bytes, "event_range", {})
    (records, refused, undated), = _cache.query(root, timezone, max_bytes, "record_counts", {})
    return Inventory(_from_us(first).date() if first is not None else None,
                     _from_us(last).date() if last is not None else None,
                     records, refused, undated, _cache.discovery)


def transcript_date_range(root: Path, *, timezone: str = "UTC", max_bytes: int = 1_000_000):
    """The first and last UTC day any record under `root` is attributed to, or None."""
    found = transcript_inventory(root, timezone=timezone, max_bytes=max_bytes)
    return None if found.first_day is None else (found.first_day, found.last_day)


def undated_records(root: Path, *, timezone: str = "UTC", max_bytes: int = 1_000_000) -> list[QuarantinedRecord]:
    """The records no readable time dates: all refused (a readable time is required)."""
    return [_row_to_result(row) for row in _cache.query(root, timezone, max_bytes, "undated_records", {})]


def transcript_days(root: Path, files: Sequence[Path] | None = None, *, timezone: str = "UTC",
                    max_bytes: int = 1_000_000) -> list[date]:
    """Every UTC day a record under `root` (or only in `files`) is attributed to: the
    partitions it touches."""
    base = root if root.is_dir() else root.parent
    sources = [Path(f).relative_to(base).as_posix() for f in files] if files is not None else []
    return [(_EPOCH + timedelta(days=row[0])).date()
            for row in _cache.query(root, timezone, max_bytes, "event_days",
                                    {"all_sources": files is None, "sources": sources})]

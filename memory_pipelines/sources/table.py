"""An agent's own message table (or view) in PostgreSQL as a transcript source.

`postgresql://user@host/db?table=NAME[&watermark=COLUMN]`: the columns holding each
canonical field come from `MEMORY_SOURCE_COLUMNS` (unset: the columns of the canonical
names); other columns are kept in `metadata`. A day's run reads only that day's rows (by the
time column) through a server-side cursor, `MEMORY_SOURCE_BATCH_ROWS` at a time; the sensor
reads only the rows whose watermark column (default: the time column) passed the last one it
saw. A row changed after it was archived is refused as `conflicting_duplicate`: the archive
keeps what was first ingested.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from memory_pipelines.config import mask_url
from memory_pipelines.db import transcripts as transcripts_db
from memory_pipelines.db.queries import query
from memory_pipelines.formats import CANONICAL_FIELDS, RawRecord
from memory_pipelines.records import QuarantinedRecord, TimeWindow, TranscriptScan
from memory_pipelines.sources.base import Changes, Inventory, ScanPlan, TranscriptSourceError
from memory_pipelines.core.transcript_scan import (
    EPOCH, SourcedRecords, day_of, day_window, raw_table, row_to_result, scan_of, to_us, validate,
)

REQUIRED = ("session_id", "seq", "role", "content", "ts")
TIME_TYPES = ("timestamp with time zone", "timestamp without time zone", "date")
_URL_PARAMETERS = ("table", "watermark")


def _shared_columns(columns: dict[str, str]) -> dict[str, list[str]]:
    """Columns that several canonical fields are mapped to (column -> the fields)."""
    fields: dict[str, list[str]] = {}
    for name, column in columns.items():
        fields.setdefault(column, []).append(name)
    return {column: names for column, names in fields.items() if len(names) > 1}


class TableSource:
    def __init__(self, settings) -> None:
        parts = urlsplit(settings.location)
        params = dict(parse_qsl(parts.query))
        self.table = params["table"]
        # `schema.table` or `table`, each part as it is spelled (case kept)
        self._table = sql.Identifier(*self.table.split("."))
        self.location = mask_url(settings.location)
        # the rest of the query string are libpq's own parameters (sslmode, …)
        self._conninfo = urlunsplit(parts._replace(query=urlencode(
            {k: v for k, v in params.items() if k not in _URL_PARAMETERS})))
        self._watermark = params.get("watermark")
        self._settings = settings
        self._columns: dict[str, str] | None = None

    # -- the table and its mapping

    def _connect(self) -> psycopg.Connection:
        try:
            conn = psycopg.connect(self._conninfo, connect_timeout=10)
        except psycopg.OperationalError as exc:
            raise TranscriptSourceError(f"cannot connect to the transcript database {self.location}: "
                                        f"{str(exc).strip().splitlines()[0]}") from None
        try:
            # a time written without a zone is read in the configured zone, as in files
            conn.execute("SELECT set_config('TimeZone', %s, false)", [self._settings.timezone])
        except BaseException:
            conn.close()
            raise
        return conn

    def _mapping(self, conn: psycopg.Connection) -> dict[str, str]:
        """canonical field → column, checked against the table once per source."""
        if self._columns is not None:
            return self._columns
        types = transcripts_db.source_table_columns(conn, self._table.as_string(conn))
        if not types:
            raise TranscriptSourceError(f"no table or view {self.table!r} in {self.location} (name it with ?table=)")
        given = self._settings.columns
        shared = _shared_columns(given)
        if shared:
            column, names = next(iter(shared.items()))
            raise TranscriptSourceError(f"MEMORY_SOURCE_COLUMNS maps {' and '.join(names)} to the one column "
                                        f"{column!r}: map each canonical field to a column of its own")
        mapping = {name: given.get(name, name) for name in CANONICAL_FIELDS if given.get(name, name) in types}
        for name, column in given.items():
            if column not in types:
                raise TranscriptSourceError(f"MEMORY_SOURCE_COLUMNS maps {name} to {column!r}, which {self.table} "
                                            f"lacks (its columns: {', '.join(types)})")
        missing = [n for n in REQUIRED if n not in mapping]
        if "user_id" not in mapping and self._settings.source_user is None:
            missing.append("user_id")
        if missing:
            raise TranscriptSourceError(
                f"{self.table} has no column for {', '.join(missing)}: map them with MEMORY_SOURCE_COLUMNS="
                + ",".join(f"{n}=<column>" for n in missing)
                + (" (or set MEMORY_SOURCE_USER)" if "user_id" in missing else ""))
        if types[mapping["ts"]] not in TIME_TYPES:
            raise TranscriptSourceError(f"{self.table}.{mapping['ts']} is {types[mapping['ts']]}: the time column "
                                        "must be a timestamp, timestamptz or date")
        if self._watermark is not None and self._watermark not in types:
            raise TranscriptSourceError(f"?watermark={self._watermark}: {self.table} has no such column")
        self._columns = mapping
        return mapping

    def _sql(self, name: str, mapping: dict[str, str]) -> sql.Composed:
        return transcripts_db.source_table_statement(name, self._table, mapping["ts"], mapping["session_id"],
                                                     mapping["seq"], self._watermark or mapping["ts"])

    def _record(self, row: dict, mapping: dict[str, str], ordinal: int) -> SourcedRecords:
        """One row as a canonical record: mapped columns by their canonical names, the others
        (less the watermark, which moves without the message changing) in metadata."""
        raw = json.dumps(row, ensure_ascii=False)
        record = {name: row.pop(column) for name, column in mapping.items()}
        row.pop(self._watermark, None)
        row_id = record.pop("id", None)
        metadata = record.get("metadata")
        if isinstance(metadata, str):
            try:
                metadata = json.loads(metadata)
            except json.JSONDecodeError:
                pass  # left as it is: validation refuses it with its reason
        if row and (metadata is None or isinstance(metadata, dict)):
            metadata = {**row, **(metadata or {})}
        if metadata is not None:
            record["metadata"] = metadata
        record.setdefault("user_id", self._settings.source_user)
        text = json.dumps(record, ensure_ascii=False, default=str)
        # a row is traced by its id when the table has one, else by session and seq; a row
        # with no time stands apart, so no neighbour dates it into another day's read
        if isinstance(row_id, int):
            source, line = self.table, row_id
        else:
            source = f"{self.table}#{record.get('session_id')}"
            line = record["seq"] if isinstance(record.get("seq"), int) else ordinal
        if record.get("ts") is None:
            source = f"{self.table}#no-time"
        return SourcedRecords(source, 0, [RawRecord(line, text, len(raw.encode()))])

    # -- what a source offers

    def plan(self, window: TimeWindow, *, include_undated: bool = False) -> ScanPlan:
        with self._connect() as conn:
            mapping = self._mapping(conn)
            days = [d for (d,) in conn.execute(self._sql("source_table_days", mapping),
                                               {"start": window.start, "end": window.end})]
            (first,), = conn.execute(self._sql("source_table_first_day", mapping)).fetchall()
        windows = tuple(day_window(window, d) for d in days)
        if include_undated and not windows:
            windows = (window,)
        # rows with no time are read once in the table's history, not by every day's run: by
        # a run whose range holds the table's first day (or any, when no row has a time)
        undated_in = windows[0] if include_undated and windows and (first is None or first in days) else None

        def read(w: TimeWindow) -> Iterator[TranscriptScan]:
            yield scan_of(w, self._rows(w, undated=w == undated_in), 1, ())

        return ScanPlan(windows, read)

    def _rows(self, window: TimeWindow | None, *, undated: bool) -> list[tuple]:
        """The validated rows of a window (None: of no time) and, with `undated`, of the rows
        that hold no time."""
        start, end = (window.start, window.end) if window else (EPOCH, EPOCH)
        batches: list[SourcedRecords] = []
        with self._connect() as conn:
            mapping = self._mapping(conn)
            with conn.cursor(name="memory_transcript_rows") as cursor:
                cursor.itersize = self._settings.batch_rows
                cursor.execute(self._sql("source_table_rows", mapping), {"start": start, "end": end, "undated": undated})
                while rows := cursor.fetchmany(self._settings.batch_rows):
                    batches.extend(self._record(json.loads(text), mapping, len(batches) + 1) for (text,) in rows)
        con = validate(raw_table(batches), timezone=self._settings.timezone,
                       max_bytes=self._settings.max_message_bytes)
        try:
            return con.execute(query("window_records"),
                               {"start_us": to_us(start), "end_us": to_us(end), "undated": undated}).fetchall()
        finally:
            con.close()

    def inventory(self) -> Inventory:
        with self._connect() as conn:
            (count, untimed, first, last, days), = conn.execute(
                self._sql("source_table_inventory", self._mapping(conn))).fetchall()
        # rows with no time are refused (validation says why) and undated only when none has one
        return Inventory(day_of(first) if first is not None else None, day_of(last) if last is not None else None,
                         count, untimed, count if first is None else 0, days)

    def undated_records(self) -> Iterator[QuarantinedRecord]:
        yield from (row_to_result(row) for row in self._rows(None, undated=True))

    def changes(self, cursor: dict) -> Changes:
        with self._connect() as conn:
            mapping = self._mapping(conn)
            (latest,), = conn.execute(self._sql("source_table_watermark", mapping)).fetchall()
            last = cursor.get("watermark")
            if latest is None or latest == last:
                return Changes((), {"watermark": latest})
            if last is None:
                rows = conn.execute(self._sql("source_table_days", mapping),
                                    {"start": date(1970, 1, 1), "end": date(9999, 1, 1)}).fetchall()
                changed = ("every row",)
            else:
                rows = conn.execute(self._sql("source_table_days_past", mapping), {"last": last}).fetchall()
                changed = (f"{rows[0][1] if rows else 0} row(s) past watermark {last}",)
        return Changes(tuple(day_of(row[0]) for row in rows), {"watermark": latest}, changed)


"""canonical: the schema's own records (JSON Lines, Parquet rows, a `.json` array of them)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from memory_pipelines.formats.common import (
    RawRecord,
    _decode_line,
    _json_document,
    _jsonl_lines,
)
from memory_pipelines.records import TRANSCRIPT_FORMATS, QuarantineReason


# the fields every canonical record has (the schema's `required`)
REQUIRED = ("session_id", "user_id", "seq", "role", "content", "ts")
_QUOTED = tuple(f'"{name}"' for name in REQUIRED)
KEYS_SHOWN = 8


def _foreign(value: object) -> str | None:
    """What a record that holds none of the canonical fields looks like, as a refusal's one
    line: it is in some other format (None: it is canonical, or broken in its own ways)."""
    if not isinstance(value, dict) or any(name in value for name in REQUIRED):
        return None
    keys = sorted(value)
    shown = ", ".join(keys[:KEYS_SHOWN]) + (f" and {len(keys) - KEYS_SHOWN} more" if len(keys) > KEYS_SHOWN else "")
    return (f"canonical: an object with {shown or 'no keys'} has none of the canonical fields ({', '.join(REQUIRED)}) "
            f"and no other format recognised the file; if it is one, set MEMORY_TRANSCRIPT_FORMAT "
            f"({', '.join(f for f in TRANSCRIPT_FORMATS if f != 'canonical')})")


def _jsonl_records(data: bytes) -> Iterator[RawRecord]:
    for number, line in _jsonl_lines(data):
        text, reason, detail = _decode_line(line)
        if reason is None and not any(key in text for key in _QUOTED):
            try:
                detail = _foreign(json.loads(text))
            except json.JSONDecodeError:
                detail = None
            reason = QuarantineReason.MISSING_FIELD if detail else None
        yield RawRecord(number, text, len(line), reason, detail)



def _json_array_records(data: bytes) -> Iterator[RawRecord]:
    text, items, reason, detail = _json_document(data)
    if reason is None and not isinstance(items, list):
        reason, detail = QuarantineReason.NOT_AN_OBJECT, "a .json transcript must hold a JSON array of messages"
    if reason is not None:
        # The whole file is one refused record: line 0 stands for "the file".
        yield RawRecord(0, text, len(data), reason, detail)
        return
    for number, item in enumerate(items, start=1):
        raw = json.dumps(item, ensure_ascii=False)
        foreign = _foreign(item)
        yield RawRecord(number, raw, len(raw.encode()), QuarantineReason.MISSING_FIELD if foreign else None, foreign)


def _parquet_records(data: bytes) -> Iterator[RawRecord]:
    # imported where a Parquet file is read: the duckdb wheel needs an x86-64-v3 CPU, and a
    # command that reads none (`doctor` saying so) must not die importing it
    import duckdb
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(data))
        # DuckDB writes each row's JSON, as reading the file with read_parquet did
        with duckdb.connect() as con:
            con.register("p", table)
            rows = con.execute("SELECT row_number() OVER () AS line, to_json(p)::VARCHAR AS raw FROM p").fetchall()
    except (pa.ArrowException, duckdb.Error) as exc:
        yield RawRecord(0, "", len(data), QuarantineReason.UNREADABLE_FILE,
                        f"cannot read Parquet file: {str(exc).splitlines()[0]}")
        return
    for number, raw in rows:
        yield RawRecord(int(number), raw, len(raw.encode()))


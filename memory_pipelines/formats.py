"""The transcript formats real agents write, decoded into this project's canonical records
(`schemas/transcript_message.schema.json`).

A file's bytes become `RawRecord`s: each the JSON text of one canonical record, which
`scan_records` (`sql/queries/transcript_scan.sql`) then validates, or a record refused before
validation with its reason and one line naming what to fix. Nothing here raises on bad
input: every fault is a refused record. The formats (mapping tables in docs/formats.md):

- canonical: the schema's own records: JSON Lines, Parquet rows, or a `.json` array of them
  (such as a per-session `history.json`);
- openai: JSON Lines of chat-completion conversations, one `messages` array a line;
- agent-events: JSON Lines of a coding agent's session events, one `message` an event;
- chat-export: a chat service's `conversations.json`, message trees whose current path is a
  session and whose other branches are its forks.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from memory_pipelines.records import TRANSCRIPT_FORMATS, Message, QuarantineReason

TRANSCRIPT_SUFFIXES = (".jsonl", ".ndjson", ".parquet", ".json")
ACCEPTED_KINDS = (".jsonl or .ndjson (JSON Lines), .parquet, or .json (a JSON array of messages such as "
                  "history.json, or a chat-service conversations.json export)")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
# the names a field mapping may set: the canonical fields, and `id` (a table's row key,
# MEMORY_SOURCE_COLUMNS); the file formats read session_id, user_id, ts and agent_id of it
CANONICAL_FIELDS = ("session_id", "user_id", "seq", "role", "content", "ts", "agent_id", "tool_name", "tool_args",
                    "tool_call_id", "metadata", "parent_session_id", "fork_seq", "id")
# quarantine keeps this much of a refused record's text (scan_records' left(raw, 4000))
RAW_CAP = 4000
# a string of a non-text part kept in metadata is cut past this (an inline image's data)
KEPT_CHARS = 500

# where each format finds a line's session, user and time: the first path holding one wins
_OPENAI_PATHS = {
    # not `id`: in chat-completion logs it names one request, and every line would be a session
    "session_id": ("session_id", "conversation_id", "metadata.session_id", "metadata.conversation_id"),
    "user_id": ("user_id", "user", "metadata.user_id", "metadata.user"),
    "ts": ("created_at", "created", "timestamp", "metadata.created_at"),
    "agent_id": (),
}
_EVENT_PATHS = {
    "session_id": ("sessionId", "session_id"),
    "user_id": ("userId", "user_id"),
    "ts": ("timestamp",),
    "agent_id": (),
}
_MESSAGE_TIME_KEYS = ("timestamp", "created_at")  # an openai message's own time
_BOM = b"\xef\xbb\xbf"
_JSON_SPACE = re.compile(r"[ \t\n\r]*")


@dataclass(frozen=True, slots=True)
class RawRecord:
    line: int  # 1-based record number in the file (line, row or ordinal); 0 = the whole file
    raw: str  # the canonical record as JSON text (what scan_records parses), or the original text when refused
    raw_bytes: int  # size in bytes of the source record (for the too_large cap)
    pre_reason: str | None = None  # a QuarantineReason value when refused before validation
    pre_detail: str | None = None  # one line naming what to fix


@dataclass(frozen=True)
class FormatOptions:
    # canonical field -> dotted path in a source record (openai, agent-events), overriding the defaults
    fields: Mapping[str, str] = field(default_factory=dict)
    # the user a source's transcripts belong to when its format names none (MEMORY_SOURCE_USER)
    user_id: str | None = None


def is_transcript_name(name: str) -> bool:
    """Whether a file of this name is read as transcripts (by suffix, case-insensitive)."""
    return _suffix(name) in TRANSCRIPT_SUFFIXES


def parse_field_mapping(text: str) -> dict[str, str]:
    """`session_id=conversation_id,user_id=metadata.user` as {canonical field: dotted path}."""
    mapping: dict[str, str] = {}
    allowed = ", ".join(CANONICAL_FIELDS)
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, path = (s.strip() for s in part.partition("="))
        if not sep or not path:
            raise ValueError(f"field mapping {part!r} is not canonical=path (canonical: {allowed})")
        if name not in CANONICAL_FIELDS:
            raise ValueError(f"field mapping {part!r}: {name!r} is no canonical field (canonical: {allowed})")
        if "" in path.split("."):
            raise ValueError(f"field mapping {part!r}: the path {path!r} has an empty step")
        if name in mapping:
            raise ValueError(f"field mapping {part!r}: {name} is mapped twice")
        mapping[name] = path
    return mapping


def detect_format(name: str, data: bytes) -> str:
    """The format a file is in, from its name and first records; canonical when nothing else fits
    (its own per-record errors then explain)."""
    suffix = _suffix(name)
    if suffix == ".json":
        first = _first_array_object(_text(data))
        return "chat-export" if first is not None and _is_conversation(first) else "canonical"
    if suffix in JSONL_SUFFIXES:
        return _jsonl_format(data)
    return "canonical"


def decode_records(name: str, data: bytes, fmt: str | None = None,
                   options: FormatOptions = FormatOptions()) -> Iterator[RawRecord]:
    """The canonical records a file holds, in file order. `fmt` None (or "auto"): detected. A
    forced format that does not fit the file gives refused records, never an exception."""
    if fmt is None or fmt == "auto":
        fmt = detect_format(name, data)
    if fmt not in TRANSCRIPT_FORMATS:
        raise ValueError(f"unknown transcript format {fmt!r} (expected auto or one of {', '.join(TRANSCRIPT_FORMATS)})")
    suffix = _suffix(name)
    if suffix == ".parquet":
        if fmt == "canonical":
            return _parquet_records(data)
        return iter([RawRecord(0, "", len(data), QuarantineReason.UNMAPPED,
                               f"format {fmt} is not read from Parquet: a .parquet file holds canonical records "
                               "(set MEMORY_TRANSCRIPT_FORMAT=auto or canonical)")])
    if fmt == "canonical":
        return _json_array_records(data) if suffix == ".json" else _jsonl_records(data)
    if fmt == "openai":
        return _numbered(_openai_records(data, options))
    if fmt == "agent-events":
        return _event_records(data, options)
    return _chat_export_records(data, options)


# -- shared helpers


def _suffix(name: str) -> str:
    return PurePosixPath(name).suffix.lower()


def _text(data: bytes) -> str:
    return (data[3:] if data.startswith(_BOM) else data).decode("utf-8", "replace")


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


def _jsonl_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes) of every non-blank line; a leading BOM and line-end `\\r` dropped."""
    if data.startswith(_BOM):
        data = data[3:]
    for number, line in enumerate(data.split(b"\n"), start=1):
        line = line.rstrip(b"\r")
        if line.strip():
            yield number, line


def _kind(value: Any) -> str:
    """How a JSON value is named in details (the words scan_records uses)."""
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    if value is None:
        return "null"
    return "a boolean" if isinstance(value, bool) else "a number"


def _parse_object(line: bytes) -> tuple[str, dict | None, str | None, str | None]:
    """A JSON Lines line's text and the object it holds, or the reason and detail it holds none."""
    text, reason, detail = _decode_line(line)
    if reason is not None:
        return text, None, reason, detail
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return text, None, QuarantineReason.MALFORMED_JSON, f"not valid JSON: {exc.msg} at column {exc.colno}"
    if not isinstance(value, dict):
        return text, None, QuarantineReason.NOT_AN_OBJECT, f"a line must be a JSON object, got {_kind(value)}"
    return text, value, None, None


def _at(obj: Any, path: str) -> Any:
    """The value at a dotted path (`metadata.user`), None when any step is missing."""
    for key in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _as_id(value: Any) -> str | None:
    """An id as text: a non-blank string, or an integer (some logs number their sessions)."""
    if isinstance(value, str) and value.strip():
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _as_time(value: Any) -> str | None:
    """A time as the canonical `ts`: a string as written (validation reads it), a number as
    epoch seconds (OpenAI's `created`, chat exports' `create_time`) in RFC 3339 UTC."""
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return datetime.fromtimestamp(value, UTC).isoformat().replace("+00:00", "Z")
        except (OverflowError, OSError, ValueError):
            # out of any calendar: the number as text, which validation refuses naming it
            return str(value)
    return None


def _paths(defaults: Mapping[str, tuple[str, ...]], options: FormatOptions, name: str) -> tuple[str, ...]:
    """Where a field is looked for: the mapped path alone, else the format's defaults."""
    mapped = options.fields.get(name)
    return (mapped,) if mapped else defaults[name]


def _first(obj: dict, paths: tuple[str, ...], convert) -> tuple[str | None, Any]:
    """The first path whose value converts, and that value; (None, None) when none does."""
    for path in paths:
        value = convert(_at(obj, path))
        if value is not None:
            return path, value
    return None, None


@dataclass(frozen=True, slots=True)
class _Located:
    """What a source line names of its session, user, time and agent, and the top-level keys
    those came from (they are not repeated in metadata)."""
    session_id: str | None
    user_id: str | None
    ts: str | None
    agent_id: str | None
    used_keys: frozenset[str]


def _locate(obj: dict, defaults: Mapping[str, tuple[str, ...]], options: FormatOptions) -> _Located:
    found = {name: _first(obj, _paths(defaults, options, name), _as_time if name == "ts" else _as_id)
             for name in ("session_id", "user_id", "ts", "agent_id")}
    used = frozenset(path for path, _ in found.values() if path is not None and "." not in path)
    user_id = found["user_id"][1] or options.user_id
    return _Located(found["session_id"][1], user_id, found["ts"][1], found["agent_id"][1], used)


def _no_session(defaults: Mapping[str, tuple[str, ...]], options: FormatOptions) -> str:
    return (f"no session id: none of {', '.join(_paths(defaults, options, 'session_id'))} found; "
            "map it with MEMORY_FORMAT_FIELDS=session_id=<path>")


def _no_user(defaults: Mapping[str, tuple[str, ...]], options: FormatOptions) -> str:
    return (f"no user id: none of {', '.join(_paths(defaults, options, 'user_id'))} found; "
            "set MEMORY_SOURCE_USER or map user_id in MEMORY_FORMAT_FIELDS")


def _no_time(defaults: Mapping[str, tuple[str, ...]], options: FormatOptions, *also: str) -> str:
    return (f"no time: none of {', '.join([*also, *_paths(defaults, options, 'ts')])} found; "
            "map it with MEMORY_FORMAT_FIELDS=ts=<path>")


def _text_of(content: Any) -> tuple[str, list] | None:
    """The text of a content value and its parts that hold none: a string; null (no text); or
    a list of parts, where strings and objects with a string `text` are text (joined by
    newlines) and the others (images, audio, files) are kept as `_kept` keeps them. None: no
    content shape."""
    if content is None:
        return "", []
    if isinstance(content, str):
        return content, []
    if not isinstance(content, list):
        return None
    is_text = [isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str)) for p in content]
    texts = [p if isinstance(p, str) else p["text"] for p, t in zip(content, is_text) if t]
    return "\n".join(texts), [_kept(p) for p, t in zip(content, is_text) if not t]


def _kept(value: Any) -> Any:
    """A source value for metadata, its long strings (inline images, file bodies) cut to what
    says what they were: a record stays within the message size cap."""
    if isinstance(value, str) and len(value) > KEPT_CHARS:
        return f"{value[:KEPT_CHARS]}… [{len(value):,} characters, cut]"
    if isinstance(value, dict):
        return {k: _kept(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_kept(v) for v in value]
    return value


def call_arguments(messages: Iterable[Message]) -> dict[str, dict | None]:
    """The arguments of every tool call the assistant messages made, by call id: a message's
    own call (`tool_call_id`, `tool_args`) and the others when it made several at once, as
    its metadata keeps them (`tool_calls` of the openai format, `tool_uses` of agent-events)."""
    found: dict[str, dict | None] = {}
    for message in messages:
        if message.role != "assistant":
            continue
        for call in _list(message.metadata.get("tool_calls")):
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                found[call["id"]] = _tool_args(_at(call, "function.arguments"))
        for use in _list(message.metadata.get("tool_uses")):
            if isinstance(use, dict) and isinstance(use.get("id"), str):
                found[use["id"]] = _tool_args(use.get("input"))
        if message.tool_call_id:
            found[message.tool_call_id] = message.tool_args
    return found


def _tool_args(arguments: Any) -> dict | None:
    """A tool call's arguments as an object; OpenAI sends them as JSON text, which a model may
    have written broken: kept whole under `_raw` then."""
    if arguments is None or isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"_raw": arguments}


def _message(session_id: str, user_id: str, seq: int, role: Any, content: str, ts: str, *,
             agent_id: str | None = None, tool_name: Any = None, tool_args: dict | None = None,
             tool_call_id: Any = None, metadata: dict | None = None, parent_session_id: str | None = None,
             fork_seq: int | None = None) -> RawRecord:
    """A canonical record; fields without a value are left out, as the canonical files write them."""
    record = {"session_id": session_id, "user_id": user_id, "seq": seq, "role": role, "content": content, "ts": ts,
              "agent_id": agent_id, "tool_name": tool_name, "tool_args": tool_args, "tool_call_id": tool_call_id,
              "metadata": {k: v for k, v in (metadata or {}).items() if v is not None} or None,
              "parent_session_id": parent_session_id, "fork_seq": fork_seq}
    raw = json.dumps({k: v for k, v in record.items() if v is not None}, ensure_ascii=False)
    return RawRecord(0, raw, len(raw.encode()))


def _numbered(records: Iterator[RawRecord]) -> Iterator[RawRecord]:
    """Records numbered 1, 2, 3… in the order emitted: a source line or conversation may give
    several, and (file, line, reason) must stay unique in quarantine."""
    for number, record in enumerate(records, start=1):
        yield replace(record, line=number)


# -- canonical


def _jsonl_records(data: bytes) -> Iterator[RawRecord]:
    for number, line in _jsonl_lines(data):
        text, reason, detail = _decode_line(line)
        yield RawRecord(number, text, len(line), reason, detail)


def _json_document(data: bytes) -> tuple[str, Any, str | None, str | None]:
    """A `.json` file's text and value, or the reason and detail it holds none."""
    text, reason, detail = _decode_line(data)
    if reason is not None:
        return text, None, reason, detail
    try:
        return text, json.loads(text), None, None
    except json.JSONDecodeError as exc:
        return text, None, QuarantineReason.MALFORMED_JSON, f"not a valid JSON array: {exc.msg} at line {exc.lineno}"


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
        yield RawRecord(number, raw, len(raw.encode()))


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


# -- detection


def _first_array_object(text: str) -> dict | None:
    """The first object element of a JSON array, read without parsing the rest (an export
    runs to hundreds of megabytes); None when the text is no array or holds no object."""
    decoder = json.JSONDecoder()
    at = _JSON_SPACE.match(text).end()
    if not text.startswith("[", at):
        return None
    at += 1
    while True:
        try:
            value, at = decoder.raw_decode(text, _JSON_SPACE.match(text, at).end())
        except json.JSONDecodeError:
            return None
        if isinstance(value, dict):
            return value
        at = _JSON_SPACE.match(text, at).end()
        if not text.startswith(",", at):
            return None
        at += 1


def _is_conversation(obj: dict) -> bool:
    return "mapping" in obj and ("current_node" in obj or "title" in obj)


def _jsonl_format(data: bytes) -> str:
    """The format of JSON Lines, from the first object line that tells (a session log may open
    with summary events)."""
    for _, line in _jsonl_lines(data):
        try:
            obj = json.loads(line.decode("utf-8", "replace"))
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        if isinstance(obj.get("messages"), list):
            return "openai"
        if isinstance(obj.get("message"), dict) and any(k in obj for k in ("sessionId", "uuid", "parentUuid")):
            return "agent-events"
        # an event holding no message (a summary, a snapshot) tells nothing; a record does
        if not (isinstance(obj.get("type"), str) and "message" not in obj and "role" not in obj):
            return "canonical"
    return "canonical"


# -- openai


def _openai_records(data: bytes, options: FormatOptions) -> Iterator[RawRecord]:
    # (session, seq) -> the message (with its user and agent) first seen there, and its record
    first_seen: dict[tuple[str, int], tuple[tuple, RawRecord]] = {}
    for number, line in _jsonl_lines(data):
        text, obj, reason, detail = _parse_object(line)
        if obj is None:
            yield RawRecord(0, text, len(line), reason, f"line {number}: {detail}")
        else:
            yield from _openai_line(number, text, len(line), obj, options, first_seen)


def _openai_line(number: int, text: str, size: int, obj: dict, options: FormatOptions,
                 first_seen: dict[tuple[str, int], tuple[tuple, RawRecord]]) -> Iterator[RawRecord]:
    def refused(detail: str, raw: str = text, raw_bytes: int = size) -> RawRecord:
        return RawRecord(0, raw, raw_bytes, QuarantineReason.UNMAPPED, f"line {number}: {detail}")

    messages = obj.get("messages")
    if not isinstance(messages, list):
        yield refused('no messages array: format openai reads one conversation a line, {"messages": [...], ...}')
        return
    if not messages:
        yield refused("the messages array is empty")
        return
    found = _locate(obj, _OPENAI_PATHS, options)
    if found.session_id is None:
        yield refused(_no_session(_OPENAI_PATHS, options))
        return
    if found.user_id is None:
        yield refused(_no_user(_OPENAI_PATHS, options))
        return
    line_fields = {k: v for k, v in obj.items() if k != "messages" and k not in found.used_keys}
    calls: dict[str, str] = {}  # tool call id -> tool name, of the calls earlier in this array
    for index, message in enumerate(messages):
        seq = index + 1
        if not isinstance(message, dict):
            yield refused(f"message {index} is not an object", json.dumps(message, ensure_ascii=False))
            continue
        for call in _list(message.get("tool_calls")):
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                calls[call["id"]] = _at(call, "function.name")
        # A growing chat re-sends its earlier messages on every line: the same message at
        # the same place gives the very record of its first line (its time and metadata
        # included), so the pipeline counts it a duplicate, not a conflicting one.
        source = (message, found.user_id, found.agent_id)
        seen = first_seen.get((found.session_id, seq))
        if seen is not None and seen[0] == source:
            yield seen[1]
            continue
        record = _openai_message(index, message, found, line_fields, calls, options)
        if isinstance(record, str):
            yield refused(f"message {index}: {record}", *_sized(message))
            continue
        # the first mapping stays: the message seen again later gives the first line's record
        first_seen.setdefault((found.session_id, seq), (source, record))
        yield record


def _sized(value: Any) -> tuple[str, int]:
    """The JSON text of a source value, and its size in bytes."""
    raw = json.dumps(value, ensure_ascii=False)
    return raw, len(raw.encode())


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


_OPENAI_MESSAGE_KEYS = {"role", "content", "tool_calls", "tool_call_id", *_MESSAGE_TIME_KEYS}


def _openai_message(index: int, message: dict, found: _Located, line_fields: dict,
                    calls: dict[str, str], options: FormatOptions) -> RawRecord | str:
    """One message's record, or why it has none."""
    _, ts = _first(message, _MESSAGE_TIME_KEYS, _as_time)
    ts = ts or found.ts
    if ts is None:
        return _no_time(_OPENAI_PATHS, options, *(f"messages[].{k}" for k in _MESSAGE_TIME_KEYS))
    text = _text_of(message.get("content"))
    if text is None:
        return f"content is {_kind(message.get('content'))}, not a string, null or a list of parts"
    content, non_text = text
    role = message.get("role")
    tool_calls = [c for c in _list(message.get("tool_calls")) if isinstance(c, dict)]
    first_call = tool_calls[0] if tool_calls else {}
    tool_call_id = first_call.get("id") if tool_calls else message.get("tool_call_id")
    tool_name = _at(first_call, "function.name") if tool_calls else None
    if role == "tool":
        tool_name = message.get("name") or (calls.get(tool_call_id) if isinstance(tool_call_id, str) else None)
    known = _OPENAI_MESSAGE_KEYS | ({"name"} if role == "tool" else set())
    # where the message was read (the line, its index) is left out: a chat continued in another
    # file re-sends it, and its record must be the same to count as a duplicate
    metadata = {
        # newer APIs name the system prompt's role `developer`
        "source_role": "developer" if role == "developer" else None,
        "tool_calls": tool_calls or None,
        "non_text_parts": non_text or None,
        "message": {k: v for k, v in message.items() if k not in known} or None,
        "line": line_fields or None,
    }
    return _message(found.session_id, found.user_id, index + 1, "system" if role == "developer" else role,
                    content, ts, agent_id=found.agent_id, tool_name=tool_name,
                    tool_args=_tool_args(_at(first_call, "function.arguments")) if tool_calls else None,
                    tool_call_id=tool_call_id, metadata=metadata)


# -- agent-events


def _event_records(data: bytes, options: FormatOptions) -> Iterator[RawRecord]:
    seqs: Counter[str] = Counter()  # message events so far, by session
    tool_names: dict[str, Any] = {}  # tool_use id -> tool name, of the file's events so far
    for number, line in _jsonl_lines(data):
        text, obj, reason, detail = _parse_object(line)
        if obj is None:
            yield RawRecord(number, text, len(line), reason, detail)
        else:
            yield replace(_event_record(text, len(line), obj, options, seqs, tool_names), line=number)


def _event_record(text: str, size: int, obj: dict, options: FormatOptions, seqs: Counter[str],
                  tool_names: dict[str, Any]) -> RawRecord:
    def refused(detail: str) -> RawRecord:
        return RawRecord(0, text, size, QuarantineReason.UNMAPPED, detail)

    message = obj.get("message")
    if not isinstance(message, dict):
        kind = obj.get("type")
        return refused(f"event of type '{kind}' holds no message" if isinstance(kind, str)
                       else "event without a type holds no message")
    found = _locate(obj, _EVENT_PATHS, options)
    if found.session_id is None:
        return refused(_no_session(_EVENT_PATHS, options))
    # counted before anything else can refuse it: fixing a refused event keeps later seqs
    seqs[found.session_id] += 1
    turn = _event_turn(message, obj.get("type"), tool_names)
    if isinstance(turn, str):
        return refused(turn)
    if found.user_id is None:
        return refused(_no_user(_EVENT_PATHS, options))
    if found.ts is None:
        return refused(_no_time(_EVENT_PATHS, options))
    metadata = turn.pop("metadata") | {
        "event": {k: v for k, v in obj.items() if k not in {"type", "message"} | found.used_keys} or None,
        "message": {k: v for k, v in message.items() if k not in ("role", "content")} or None,
    }
    role, content = turn.pop("role"), turn.pop("content")
    return _message(found.session_id, found.user_id, seqs[found.session_id], role, content, found.ts,
                    agent_id=found.agent_id, metadata=metadata, **turn)


def _event_turn(message: dict, kind: Any, tool_names: dict[str, Any]) -> dict | str:
    """Role, content, tool fields and metadata of an event's message, or why it has none. A
    user message of tool results alone is the tool's answer (role tool)."""
    role = message.get("role") or kind
    content = message.get("content")
    if content is None or isinstance(content, str):
        return {"role": role, "content": content or "", "metadata": {}}
    if not isinstance(content, list):
        return f"message content is {_kind(content)}, not a string or a list of blocks"
    blocks = [b for b in content if isinstance(b, dict)]
    by_type = {t: [b for b in blocks if b.get("type") == t] for t in ("text", "tool_use", "tool_result")}
    thinking = sum(1 for b in blocks if b.get("type") in ("thinking", "redacted_thinking"))
    for use in by_type["tool_use"]:
        if isinstance(use.get("id"), str):
            tool_names[use["id"]] = use.get("name")
    texts = [b["text"] for b in by_type["text"] if isinstance(b.get("text"), str)]
    known = {"text", "tool_use", "tool_result", "thinking", "redacted_thinking"}
    other = [_kept(b) for b in content if not isinstance(b, dict) or b.get("type") not in known]
    results = by_type["tool_result"]
    if results:
        # the tool's answer, with any text beside it (an interruption notice, a note)
        ids = [r.get("tool_use_id") for r in results]
        parts = [_text_of(r.get("content")) or ("", [_kept(r.get("content"))]) for r in results]
        return {"role": "tool", "content": "\n".join([*(text for text, _ in parts), *texts]),
                "tool_call_id": ids[0], "tool_name": tool_names.get(ids[0]) if isinstance(ids[0], str) else None,
                "metadata": {"is_error": True if any(r.get("is_error") is True for r in results) else None,
                             "tool_use_ids": ids if len(ids) > 1 else None,
                             "non_text_parts": [p for _, kept in parts for p in kept] or None,
                             "other_blocks": other or None}}
    uses = by_type["tool_use"]
    first = uses[0] if uses else {}
    input_ = first.get("input")
    return {"role": role, "content": "\n".join(texts),
            "tool_name": first.get("name"), "tool_call_id": first.get("id"),
            "tool_args": input_ if input_ is None or isinstance(input_, dict) else {"_raw": input_},
            "metadata": {"tool_uses": uses or None, "thinking_blocks": thinking or None,
                         "other_blocks": other or None}}


# -- chat-export


def _chat_export_records(data: bytes, options: FormatOptions) -> Iterator[RawRecord]:
    text, items, reason, detail = _json_document(data)
    if reason is None and not isinstance(items, list):
        reason, detail = (QuarantineReason.UNMAPPED,
                          f"a chat export must hold a JSON array of conversations, got {_kind(items)}")
    if reason is not None:
        yield RawRecord(0, text, len(data), reason, detail)
        return
    yield from _numbered(r for position, conversation in enumerate(items, start=1)
                         for r in _conversation_records(position, conversation, options))


def _conversation_records(position: int, conversation: Any, options: FormatOptions) -> Iterator[RawRecord]:
    def refused(detail: str) -> RawRecord:
        raw, size = _sized(conversation)
        return RawRecord(0, raw[:RAW_CAP], size, QuarantineReason.UNMAPPED, detail)

    if not isinstance(conversation, dict) or not isinstance(conversation.get("mapping"), dict):
        yield refused(f"element {position} is no conversation of a chat export: it has no mapping of message nodes")
        return
    cid = _as_id(conversation.get("id")) or _as_id(conversation.get("conversation_id"))
    if cid is None:
        yield refused(f"conversation {position} has no id or conversation_id")
        return
    mapping, current = conversation["mapping"], conversation.get("current_node")
    if not isinstance(current, str) or current not in mapping:
        yield refused(f"conversation '{cid}': its current_node {json.dumps(current)} is not in its mapping")
        return
    user_id = options.user_id or _as_id(conversation.get("user_id"))
    if user_id is None:
        yield refused(f"conversation '{cid}' names no user: set MEMORY_SOURCE_USER")
        return
    main = _node_path(mapping, current)
    if main is None:
        yield refused(f"conversation '{cid}': the parents of node '{current}' run in a loop")
        return
    seq_at: dict[str, int] = {}  # node of the current path -> seq of its last message up to there
    seq = 0
    for node_id in main:
        turn = _export_turn(mapping[node_id], conversation)
        if turn is not None:
            seq += 1
            yield _export_record(conversation, cid, user_id, node_id, turn, cid, seq)
        seq_at[node_id] = seq
    # Every other leaf is a fork of the main session (a fork of a fork would be refused),
    # from the last message it shares with the current path.
    parents = {node.get("parent") for node in mapping.values()
               if isinstance(node, dict) and isinstance(node.get("parent"), str)}
    for leaf in (n for n in mapping if n not in parents and n not in seq_at):
        path = _node_path(mapping, leaf)
        if path is None:
            yield refused(f"conversation '{cid}': the parents of node '{leaf}' run in a loop")
            continue
        shared = sum(1 for n in path if n in seq_at)  # the current path's nodes lead any path they are on
        fork_seq = seq = seq_at[path[shared - 1]] if shared else 0
        for node_id in path[shared:]:
            turn = _export_turn(mapping[node_id], conversation)
            if turn is not None:
                seq += 1
                yield _export_record(conversation, cid, user_id, node_id, turn, f"{cid}~{leaf}", seq, fork_seq)


def _export_record(conversation: dict, cid: str, user_id: str, node_id: str, turn: dict, session_id: str,
                   seq: int, fork_seq: int | None = None) -> RawRecord:
    """The record of one shown node, in the main session (fork_seq None) or a fork of it."""
    if turn["ts"] is None:
        raw, size = _sized(conversation["mapping"][node_id])
        return RawRecord(0, raw[:RAW_CAP], size, QuarantineReason.UNMAPPED,
                         f"conversation '{cid}', node '{node_id}': no create_time on the message or the conversation")
    return _message(session_id, user_id, seq, turn["role"], turn["content"], turn["ts"], tool_name=turn["tool_name"],
                    # the title only on the session's first turn: a renamed conversation, exported
                    # again, then changes one record, not every one
                    metadata=({"title": conversation.get("title")} if fork_seq is None and seq == 1 else {})
                    | {"node_id": node_id} | turn["metadata"],
                    parent_session_id=cid if fork_seq is not None else None, fork_seq=fork_seq)


def _node_path(mapping: dict, node_id: str) -> list[str] | None:
    """Node ids from the root to `node_id`, following `parent`; None when the parents loop."""
    path: list[str] = []
    seen: set[str] = set()
    while isinstance(node_id, str) and node_id in mapping:
        if node_id in seen:
            return None
        path.append(node_id)
        seen.add(node_id)
        node = mapping[node_id]
        node_id = node.get("parent") if isinstance(node, dict) else None
    return path[::-1]


def _export_turn(node: Any, conversation: dict) -> dict | None:
    """Role, content, time, tool name and metadata of a node's message; None for a node the
    conversation does not show (no message, an empty system message, a hidden one)."""
    message = node.get("message") if isinstance(node, dict) else None
    if not isinstance(message, dict):
        return None
    author = message.get("author") if isinstance(message.get("author"), dict) else {}
    content = message.get("content") if isinstance(message.get("content"), dict) else {}
    meta = message.get("metadata") if isinstance(message.get("metadata"), dict) else {}
    role = author.get("role")
    parts = content.get("parts")
    text, non_text = _text_of(parts) if isinstance(parts, list) else (
        (content["text"], []) if isinstance(content.get("text"), str) else ("", []))
    if meta.get("is_visually_hidden_from_conversation") or (role == "system" and not text.strip()):
        return None
    recipient = message.get("recipient")
    tool_name = author.get("name") if role == "tool" else (
        recipient if role == "assistant" and recipient not in (None, "all") else None)
    return {"role": role, "content": text, "tool_name": tool_name,
            "ts": _as_time(message.get("create_time")) or _as_time(conversation.get("create_time")),
            "metadata": {"content_type": content.get("content_type"), "model_slug": meta.get("model_slug"),
                         "non_text_parts": non_text or None}}

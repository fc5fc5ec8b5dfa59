"""What every transcript format shares: the raw record, the options, and the helpers that
read JSON values into canonical fields."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from memory_pipelines.records import SKIPPED_EVENT, Message, QuarantineReason

TRANSCRIPT_SUFFIXES = (".jsonl", ".ndjson", ".parquet", ".json")
ACCEPTED_KINDS = (".jsonl or .ndjson (JSON Lines), .parquet, .json (a JSON array of messages such as "
                  "history.json, or a chat-service conversations.json export), or an aider chat history "
                  "(.aider.chat.history.md)")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
# the names a field mapping may set: the canonical fields, and `id` (a table's row key,
# MEMORY_SOURCE_COLUMNS); the file formats read session_id, user_id, ts and agent_id of it
CANONICAL_FIELDS = ("session_id", "user_id", "seq", "role", "content", "ts", "agent_id", "tool_name", "tool_args",
                    "tool_call_id", "metadata", "parent_session_id", "fork_seq", "id")
# quarantine keeps this much of a refused record's text (scan_records' left(raw, 4000))
RAW_CAP = 4000
# a string of a non-text part kept in metadata is cut past this (an inline image's data)
KEPT_CHARS = 500

_BOM = b"\xef\xbb\xbf"
_JSON_SPACE = re.compile(r"[ \t\n\r]*")


@dataclass(frozen=True, slots=True)
class RawRecord:
    line: int  # 1-based record number in the file (line, row or ordinal); 0 = the whole file
    raw: str  # the canonical record as JSON text (what scan_records parses), or the original text when refused
    raw_bytes: int  # size in bytes of the source record (for the too_large cap)
    pre_reason: str | None = None  # a QuarantineReason value when refused before validation
    pre_detail: str | None = None  # one line naming what to fix; the event's kind when skipped


@dataclass(frozen=True)
class FormatOptions:
    # canonical field -> dotted path in a source record (openai, agent-events), overriding the defaults
    fields: Mapping[str, str] = field(default_factory=dict)
    # the user a source's transcripts belong to when its format names none (MEMORY_SOURCE_USER)
    user_id: str | None = None


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
    """A canonical record; fields without a value are left out, as the canonical files write them.
    An assistant turn that only calls tools says so in its content (`[called Bash(command=…)]`):
    an empty turn would be served as nothing."""
    if role == "assistant" and not content.strip():
        content = _called(metadata or {}, tool_name, tool_args)
    record = {"session_id": session_id, "user_id": user_id, "seq": seq, "role": role, "content": content, "ts": ts,
              "agent_id": agent_id, "tool_name": tool_name, "tool_args": tool_args, "tool_call_id": tool_call_id,
              "metadata": {k: v for k, v in (metadata or {}).items() if v is not None} or None,
              "parent_session_id": parent_session_id, "fork_seq": fork_seq}
    raw = json.dumps({k: v for k, v in record.items() if v is not None}, ensure_ascii=False)
    return RawRecord(0, raw, len(raw.encode()))


# a call's arguments are cut past this many characters in the content that names it
CALL_CHARS = 200


def _called(metadata: dict, tool_name: Any, tool_args: Any) -> str:
    """`[called NAME(key=value, …)]` for each tool call a turn made (agent-events' `tool_uses`,
    openai's `tool_calls`, else its own tool fields); "" when it made none."""
    calls = [(u.get("name"), u.get("input")) for u in _list(metadata.get("tool_uses")) if isinstance(u, dict)]
    calls += [(_at(c, "function.name"), _tool_args(_at(c, "function.arguments")))
              for c in _list(metadata.get("tool_calls")) if isinstance(c, dict)]
    if not calls and tool_name:
        calls = [(tool_name, tool_args)]
    lines = []
    for name, args in calls:
        shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in args.items()) \
            if isinstance(args, dict) else ("" if args is None else json.dumps(args, ensure_ascii=False))
        if len(shown) > CALL_CHARS:
            shown = shown[:CALL_CHARS] + "…"
        lines.append(f"[called {name or 'a tool'}({shown})]")
    return "\n".join(lines)


def _skipped(kind: str, ts: Any = None, line: int = 0) -> RawRecord:
    """A source event that is no turn (a snapshot, a notice, a title): counted as skipped by
    its kind, never quarantined; its time, if any, dates it to its day."""
    when = _as_time(ts)
    raw = json.dumps({"ts": when} if when is not None else {})
    return RawRecord(line, raw, len(raw), SKIPPED_EVENT, kind)


def _numbered(records: Iterator[RawRecord]) -> Iterator[RawRecord]:
    """Records numbered 1, 2, 3… in the order emitted: a source line or conversation may give
    several, and (file, line, reason) must stay unique in quarantine."""
    for number, record in enumerate(records, start=1):
        yield replace(record, line=number)



def _json_document(data: bytes) -> tuple[str, Any, str | None, str | None]:
    """A `.json` file's text and value, or the reason and detail it holds none."""
    text, reason, detail = _decode_line(data)
    if reason is not None:
        return text, None, reason, detail
    try:
        return text, json.loads(text), None, None
    except json.JSONDecodeError as exc:
        return text, None, QuarantineReason.MALFORMED_JSON, f"not a valid JSON array: {exc.msg} at line {exc.lineno}"



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



def _sized(value: Any) -> tuple[str, int]:
    """The JSON text of a source value, and its size in bytes."""
    raw = json.dumps(value, ensure_ascii=False)
    return raw, len(raw.encode())


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


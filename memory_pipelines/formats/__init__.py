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
  session and whose other branches are its forks;
- codex: a Codex CLI rollout, JSON Lines of `{"timestamp", "type", "payload"}` items, a session a file;
- aider: Aider's `.aider.chat.history.md`, a markdown log each run appends a session to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from memory_pipelines.formats.agent_events import _event_records
from memory_pipelines.formats.aider import _aider_records, is_history_name
from memory_pipelines.formats.canonical import (
    _json_array_records,
    _jsonl_records,
    _parquet_records,
)
from memory_pipelines.formats.chat_export import _chat_export_records
from memory_pipelines.formats.chat_export import describe as describe_conversation
from memory_pipelines.formats.codex import _codex_records, is_rollout_line
from memory_pipelines.formats.common import (
    ACCEPTED_KINDS,
    CANONICAL_FIELDS,
    _BOM,
    JSONL_SUFFIXES,
    TRANSCRIPT_SUFFIXES,
    FormatOptions,
    RawRecord,
    _first_array_object,
    _jsonl_lines,
    _numbered,
    _suffix,
    _text,
    call_arguments,
)
from memory_pipelines.formats.openai import _openai_records
from memory_pipelines.records import TRANSCRIPT_FORMATS, QuarantineReason

__all__ = ["ACCEPTED_KINDS", "CANONICAL_FIELDS", "TRANSCRIPT_FORMATS", "FormatOptions", "RawRecord", "call_arguments",
           "Detection", "decode_records", "detect", "detect_format", "is_transcript_name", "parse_field_mapping"]


def is_transcript_name(name: str) -> bool:
    """Whether a file of this name is read as transcripts (by suffix, case-insensitive; a
    markdown file only as an aider chat history, `*.chat.history.md`)."""
    return _suffix(name) in TRANSCRIPT_SUFFIXES or is_history_name(name)


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


@dataclass(frozen=True)
class Detection:
    """The format a file is read in, and what detection saw that decided it, in words."""
    format: str
    saw: str


def detect_format(name: str, data: bytes) -> str:
    """The format a file is in, from its name and first records; canonical when nothing else fits
    (its own per-record errors then explain)."""
    return detect(name, data).format


def detect(name: str, data: bytes) -> Detection:
    """`detect_format`, saying what it saw (`memory-pipelines formats` prints it)."""
    suffix = _suffix(name)
    if is_history_name(name):
        return Detection("aider", "a file named *.chat.history.md — an Aider chat history")
    if suffix == ".parquet":
        return Detection("canonical", "Parquet — rows of canonical records")
    if suffix == ".json":
        if _is_loglines_export(data):
            return Detection("agent-events", 'a JSON object with "loglines" — a Claude Code session export')
        first = _first_array_object(_text(data))
        if first is None:
            return Detection("canonical", "no JSON array of objects — read as canonical (its errors say why)")
        if _is_conversation(first):
            return Detection("chat-export", describe_conversation(first))
        return Detection("canonical", f"a JSON array of objects with {_keys(first)} — read as canonical records")
    if suffix in JSONL_SUFFIXES:
        return _jsonl_format(data)
    return Detection("canonical", f"a file named {suffix or 'without a suffix'} — read as canonical")


def _keys(obj: dict) -> str:
    keys = sorted(obj)
    return ", ".join(keys[:8]) + (f" and {len(keys) - 8} more" if len(keys) > 8 else "") if keys else "no keys"


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
    if fmt == "codex":
        return _codex_records(name, data, options)
    if fmt == "aider":
        return _aider_records(data, options)
    return _chat_export_records(data, options)



# -- detection


def _is_loglines_export(data: bytes) -> bool:
    """A Claude Code session exported as `{"loglines": [...]}` (told by its opening bytes:
    the export runs to megabytes)."""
    return re.match(rb'\s*\{\s*"loglines"\s*:\s*\[', data[:4096].removeprefix(_BOM)) is not None


def _is_conversation(obj: dict) -> bool:
    """A chat export's conversation: ChatGPT's (a `mapping` of message nodes) or Claude.ai's
    (a `chat_messages` list); `chat_export.describe` says which in words."""
    return (("mapping" in obj and ("current_node" in obj or "title" in obj))
            or isinstance(obj.get("chat_messages"), list))


def _jsonl_format(data: bytes) -> Detection:
    """The format of JSON Lines, from the first object line that tells (a session log may open
    with summary events)."""
    for number, line in _jsonl_lines(data):
        try:
            obj = json.loads(line.decode("utf-8", "replace"))
        except json.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        if isinstance(obj.get("messages"), list):
            return Detection("openai", f"line {number}: an object with a messages array — a chat-completion log")
        if isinstance(obj.get("message"), dict) and any(k in obj for k in ("sessionId", "uuid", "parentUuid")):
            return Detection("agent-events", f"line {number}: an event with a message and sessionId, uuid or "
                                             "parentUuid — a Claude Code session log")
        if is_rollout_line(obj):
            return Detection("codex", f"line {number}: a {obj.get('type')} line with a payload — a Codex CLI rollout")
        # an event holding no message (a summary, a snapshot) tells nothing; a record does
        if not (isinstance(obj.get("type"), str) and "message" not in obj and "role" not in obj):
            return Detection("canonical", f"line {number}: an object with {_keys(obj)} — read as canonical records")
    return Detection("canonical", "no line is a JSON object that tells a format — read as canonical")

"""openai: JSON Lines of chat-completion conversations, one `messages` array a line."""

from __future__ import annotations

import json
from collections.abc import Iterator

from memory_pipelines.formats.common import (
    FormatOptions,
    RawRecord,
    _as_time,
    _at,
    _first,
    _jsonl_lines,
    _kind,
    _list,
    _locate,
    _Located,
    _message,
    _no_session,
    _no_time,
    _no_user,
    _parse_object,
    _sized,
    _text_of,
    _tool_args,
)
from memory_pipelines.records import QuarantineReason

# where each format finds a line's session, user and time: the first path holding one wins
_OPENAI_PATHS = {
    # not `id`: in chat-completion logs it names one request, and every line would be a session
    "session_id": ("session_id", "conversation_id", "metadata.session_id", "metadata.conversation_id"),
    "user_id": ("user_id", "user", "metadata.user_id", "metadata.user"),
    "ts": ("created_at", "created", "timestamp", "metadata.created_at"),
    "agent_id": (),
}
_MESSAGE_TIME_KEYS = ("timestamp", "created_at")  # an openai message's own time


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


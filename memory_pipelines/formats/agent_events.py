"""agent-events: a coding agent's session log, one event a line."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from memory_pipelines.formats.common import (
    FormatOptions,
    RawRecord,
    _jsonl_lines,
    _kept,
    _kind,
    _locate,
    _message,
    _no_session,
    _no_time,
    _no_user,
    _parse_object,
    _text_of,
)
from memory_pipelines.records import QuarantineReason

_EVENT_PATHS = {
    "session_id": ("sessionId", "session_id"),
    "user_id": ("userId", "user_id"),
    "ts": ("timestamp",),
    "agent_id": (),
}


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


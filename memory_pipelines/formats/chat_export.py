"""chat-export: a chat service's `conversations.json`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from memory_pipelines.formats.common import (
    RAW_CAP,
    FormatOptions,
    RawRecord,
    _as_id,
    _as_time,
    _json_document,
    _kind,
    _message,
    _numbered,
    _sized,
    _text_of,
)
from memory_pipelines.records import QuarantineReason


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

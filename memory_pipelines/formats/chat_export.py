"""chat-export: a chat service's `conversations.json`: ChatGPT's (a `mapping` tree of message
nodes a conversation) or Claude.ai's (a `chat_messages` list a conversation)."""

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
    _kept,
    _kind,
    _list,
    _message,
    _numbered,
    _sized,
    _skipped,
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

    if isinstance(conversation, dict) and "chat_messages" in conversation and "mapping" not in conversation:
        yield from _claude_records(position, conversation, options)
        return
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


# -- Claude.ai


def describe(first: dict) -> str:
    """What detection saw in a `.json` array's first object, in words for the detection report
    (the same tests as `formats._is_conversation` and the decoding here)."""
    if "mapping" in first:
        if "current_node" in first or "title" in first:
            return "a JSON array of objects with mapping — a ChatGPT export"
        return "a JSON array of objects with mapping but neither current_node nor title — not a chat export"
    if isinstance(first.get("chat_messages"), list):
        return "a JSON array of objects with chat_messages — a Claude.ai export"
    return "a JSON array of objects with neither mapping nor chat_messages — not a chat export"


_CLAUDE = "chat-export (Claude.ai)"
_SENDER_ROLES = {"human": "user", "assistant": "assistant"}
_CLAUDE_BLOCKS = ("text", "thinking", "tool_use", "tool_result")


def _claude_records(position: int, conversation: dict, options: FormatOptions) -> Iterator[RawRecord]:
    """A Claude.ai conversation's records. Its messages in `chat_messages` order are the
    session; when they name their parents (`parent_message_uuid`, as newer exports do) the path
    to the current leaf is the session and every other leaf a fork of it, as in a ChatGPT tree."""
    cid = _as_id(conversation.get("uuid"))
    where = f"{_CLAUDE}: conversation {position}" + (f" '{cid}'" if cid is not None else "")

    def refused(detail: str, value: Any = conversation) -> RawRecord:
        raw, size = _sized(value)
        return RawRecord(0, raw[:RAW_CAP], size, QuarantineReason.UNMAPPED, where + detail)

    messages = conversation.get("chat_messages")
    if cid is None:
        yield refused(" has no uuid")
        return
    if not isinstance(messages, list):
        yield refused(f": chat_messages is {_kind(messages)}, not a list of messages")
        return
    account = conversation.get("account")
    user_id = options.user_id or _as_id(account.get("uuid") if isinstance(account, dict) else None)
    if user_id is None:
        yield refused(" names no user (no account.uuid): set MEMORY_SOURCE_USER")
        return
    turns = [_claude_turn(message, conversation) for message in messages]
    skipped: set[int] = set()  # empty messages counted once, though several paths hold them

    def records(path: list[int], session_id: str, seq: int, fork_seq: int | None,
                seq_at: dict[int, int] | None = None) -> Iterator[RawRecord]:
        for index in path:
            turn = turns[index]
            if isinstance(turn, dict) and turn["empty"]:
                if index not in skipped:
                    skipped.add(index)
                    yield _skipped("empty_message", turn["ts"])
            else:
                seq += 1
                if isinstance(turn, str):  # refused: its seq stays taken
                    yield refused(f": message {index + 1} {turn}", messages[index])
                else:
                    yield _claude_record(conversation, cid, user_id, turn, session_id, seq, fork_seq)
            if seq_at is not None:
                seq_at[index] = seq

    if not any(isinstance(m, dict) and isinstance(m.get("parent_message_uuid"), str) for m in messages):
        yield from records(list(range(len(messages))), cid, 0, None)
        return
    # a tree: every message is placed by its uuid under its parent; a parent that is no message
    # of the conversation (the root's is 00000000-0000-4000-8000-000000000000) makes a root
    index_of: dict[str, int] = {}
    for index, message in enumerate(messages):
        uid = _as_id(message.get("uuid")) if isinstance(message, dict) else None
        if not isinstance(message, dict):
            yield refused(f": message {index + 1} {turns[index]}", message)
        elif uid is None:
            yield refused(f": message {index + 1} has no uuid, so no place in the tree its messages' "
                          "parent_message_uuid make", message)
        elif uid in index_of:
            yield refused(f": message {index + 1} repeats the uuid of message {index_of[uid] + 1}", message)
        else:
            index_of[uid] = index
    if not index_of:
        return
    nodes = {uid: {"parent": _as_id(messages[index].get("parent_message_uuid"))} for uid, index in index_of.items()}
    current = conversation.get("current_leaf_message_uuid")
    current = current if isinstance(current, str) and current in nodes else max(index_of, key=index_of.get)
    main = _node_path(nodes, current)
    if main is None:
        yield refused(f": the parents of message '{current}' run in a loop")
        return
    seq_at: dict[int, int] = {}  # message of the current path -> seq of its last turn up to there
    yield from records([index_of[uid] for uid in main], cid, 0, None, seq_at)
    parents = {node["parent"] for node in nodes.values()}
    for leaf in (uid for uid in nodes if uid not in parents and index_of[uid] not in seq_at):
        path = _node_path(nodes, leaf)
        if path is None:
            yield refused(f": the parents of message '{leaf}' run in a loop")
            continue
        indexes = [index_of[uid] for uid in path]
        shared = sum(1 for index in indexes if index in seq_at)  # the current path's messages lead
        fork_seq = seq_at[indexes[shared - 1]] if shared else 0
        yield from records(indexes[shared:], f"{cid}~{leaf}", fork_seq, fork_seq)


def _claude_record(conversation: dict, cid: str, user_id: str, turn: dict, session_id: str, seq: int,
                   fork_seq: int | None) -> RawRecord:
    # the title and summary only on the session's first turn (a renamed conversation, exported
    # again, changes one record)
    first = ({"title": _nonblank(conversation.get("name")), "summary": _nonblank(conversation.get("summary"))}
             if fork_seq is None and seq == 1 else {})
    return _message(session_id, user_id, seq, turn["role"], turn["content"], turn["ts"],
                    tool_name=turn["tool_name"], tool_args=turn["tool_args"], tool_call_id=turn["tool_call_id"],
                    metadata=first | turn["metadata"],
                    parent_session_id=cid if fork_seq is not None else None, fork_seq=fork_seq)


def _claude_turn(message: Any, conversation: dict) -> dict | str:
    """A message as a turn (`empty` when it holds nothing to show: no text, tool call or
    result, attachment, file or thinking), or why it is refused, completing `message N …`."""
    if not isinstance(message, dict):
        return f"is {_kind(message)}, not an object"
    sender = message.get("sender")
    if sender is None:
        return "has no sender"
    if sender not in _SENDER_ROLES:
        return f"has sender {json.dumps(sender)}, not human or assistant"
    blocks = _list(message.get("content"))
    typed = {kind: [b for b in blocks if isinstance(b, dict) and b.get("type") == kind] for kind in _CLAUDE_BLOCKS}
    # adjacent text blocks are one stretch of text (citations split it); a tool call or a
    # thought between two stretches makes them paragraphs
    stretches: list[list[str]] = [[]]
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            stretches[-1].append(block["text"])
        elif stretches[-1]:
            stretches.append([])
    if any(stretches):
        text = "\n\n".join(s for s in ("".join(parts) for parts in stretches) if s.strip())
    else:  # no text block: the message's flat text (older exports)
        text = message["text"] if isinstance(message.get("text"), str) else ""
    text = text if text.strip() else ""
    uses, results = typed["tool_use"], typed["tool_result"]
    names = {u.get("id"): u.get("name") for u in uses if isinstance(u.get("id"), str)}
    said, non_text = [], []
    for result in results:
        read = _text_of(result.get("content"))
        out, kept = read if read is not None else ("", [_kept(result.get("content"))])
        non_text += kept
        use_id = result.get("tool_use_id")
        name = _nonblank(result.get("name")) or (names.get(use_id) if isinstance(use_id, str) else None) or "tool"
        label = f"[{name} {'error' if result.get('is_error') is True else 'result'}]"
        said.append(f"{label} {out}" if out.strip() else label)
    attachments = [a for a in _list(message.get("attachments")) if isinstance(a, dict)]
    # what the user sent: a file's extracted text, or a long paste (an attachment with no name)
    sent = [" ".join(filter(None, ("[attachment", _nonblank(a.get("file_name"))))) + "]\n" + a["extracted_content"]
            for a in attachments if _nonblank(a.get("extracted_content"))]
    files = [f["file_name"] for f in _list(message.get("files"))
             if isinstance(f, dict) and isinstance(f.get("file_name"), str)]
    # thoughts are kept as agent-events keeps them (each cut past KEPT_CHARS), never in the content
    thinking = [_kept(b["thinking"]) for b in typed["thinking"] if _nonblank(b.get("thinking"))]
    ts = _as_time(message.get("created_at")) or _as_time(conversation.get("created_at"))
    if not (text or uses or results or attachments or files or thinking):
        return {"empty": True, "ts": ts}
    if ts is None:
        return "has no created_at, nor has its conversation"
    first = uses[0] if uses else {}
    args = first.get("input")
    return {
        "empty": False, "role": _SENDER_ROLES[sender], "ts": ts,
        "content": "\n\n".join(part for part in (text, *said, *sent) if part),
        "tool_name": first.get("name") if isinstance(first.get("name"), str) else None,
        "tool_call_id": first.get("id") if isinstance(first.get("id"), str) else None,
        "tool_args": args if args is None or isinstance(args, dict) else {"_raw": args},
        "metadata": {
            "message_uuid": _as_id(message.get("uuid")),
            "thinking": thinking or None,
            "tool_uses": [{k: _kept(u[k]) for k in ("id", "name", "input", "integration_name") if u.get(k) is not None}
                          for u in uses] or None,
            "tool_results": [{k: r[k] for k in ("tool_use_id", "name", "is_error") if r.get(k) is not None}
                             for r in results] or None,
            "attachments": [{k: a[k] for k in ("file_name", "file_size", "file_type") if a.get(k) is not None}
                            for a in attachments] or None,
            "files": files or None,
            "citations": [_kept(c) for b in typed["text"] for c in _list(b.get("citations"))] or None,
            "non_text_parts": non_text or None,
            "other_blocks": [_kept(b) for b in blocks
                             if not (isinstance(b, dict) and b.get("type") in _CLAUDE_BLOCKS)] or None,
        },
    }


def _nonblank(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None

"""codex: a Codex CLI rollout (`~/.codex/sessions/YYYY/MM/DD/rollout-<local time>-<uuid>.jsonl`),
one `{"timestamp", "type", "payload"}` item a line and one session a file.

`response_item` lines are what the model saw and said: its turns. `event_msg` lines repeat them
for display (and count tokens), `session_meta` and `turn_context` describe the session and its
turns, `compacted` summarizes history: none is a turn, each is counted as skipped by its kind."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from memory_pipelines.formats.common import (
    FormatOptions,
    RawRecord,
    _as_id,
    _as_time,
    _jsonl_lines,
    _kept,
    _kind,
    _list,
    _message,
    _parse_object,
    _skipped,
    _text_of,
    _tool_args,
)
from memory_pipelines.records import QuarantineReason

# RolloutItem's variants (codex-rs protocol: `#[serde(tag = "type", content = "payload")]`)
ROLLOUT_TYPES = ("session_meta", "response_item", "turn_context", "event_msg", "compacted")
# the response items that are turns; the others (ghost_snapshot, compaction, …) are skipped
_CALLS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")
_ROLES = {"user": "user", "assistant": "assistant", "developer": "system", "system": "system"}
# what Codex itself writes as a user message (AGENTS.md, the environment, an aborted turn, a
# shell command the user ran with `!`): a turn of role user no person wrote
_HARNESS_PREFIXES = ("<environment_context>", "<user_instructions>", "# agents.md instructions", "<instructions>",
                     "<turn_aborted>", "<user_shell_command>", "<skill>", "<subagent_notification>")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
_EXIT_CODE = re.compile(r"\AExit code: (-?\d+)")
# what the first turn keeps of the session (`metadata.session`): session_meta's and the first
# turn_context's fields
_META_KEYS = ("cwd", "originator", "cli_version", "source", "model_provider", "git")
_CONTEXT_KEYS = ("model", "effort", "approval_policy", "sandbox_policy")


def is_rollout_line(obj: dict) -> bool:
    """Whether a JSON Lines object is a Codex rollout line (detection)."""
    return obj.get("type") in ROLLOUT_TYPES and isinstance(obj.get("payload"), dict)


def _codex_records(name: str, data: bytes, options: FormatOptions) -> Iterator[RawRecord]:
    lines = [(number, len(line), *_parse_object(line)) for number, line in _jsonl_lines(data)]
    objects = [obj for *_, obj, _, _ in lines if obj is not None]
    meta = next((o["payload"] for o in objects if o.get("type") == "session_meta" and isinstance(o.get("payload"), dict)
                 and _as_id(o["payload"].get("id")) is not None), None)
    context = next((o["payload"] for o in objects if o.get("type") == "turn_context"
                    and isinstance(o.get("payload"), dict)), {})
    found = _UUID.findall(name)
    session_id = _as_id(meta.get("id")) if meta is not None else (found[-1].lower() if found else None)
    session = {**{k: _kept(meta.get(k)) for k in _META_KEYS if meta is not None},
               **{k: _kept(context.get(k)) for k in _CONTEXT_KEYS}}
    reader = _Reader(session_id, options.user_id, {k: v for k, v in session.items() if v is not None})
    for number, size, text, obj, reason, detail in lines:
        if obj is None:
            yield RawRecord(number, text, size, reason, f"codex: line {number}: {detail}")
        else:
            yield from (replace(r, line=r.line or number) for r in reader.line(number, text, size, obj))
    yield from reader.flush()


class _Reader:
    """The turns of one rollout, line by line: seqs in file order, tool names by call id, and the
    reasoning waiting for the assistant turn it preceded."""

    def __init__(self, session_id: str | None, user_id: str | None, session: dict) -> None:
        self.session_id, self.user_id, self.session = session_id, user_id, session
        self.seq = 0
        self.calls: dict[str, Any] = {}  # call id -> tool name, of the calls so far
        self.reasoning: list[tuple[int, str | None, list[str]]] = []  # (line, ts, summary texts)

    def line(self, number: int, text: str, size: int, obj: dict) -> Iterator[RawRecord]:
        def refused(detail: str) -> RawRecord:
            return RawRecord(number, text, size, QuarantineReason.UNMAPPED, f"codex: line {number}: {detail}")

        kind, payload, ts = obj.get("type"), obj.get("payload"), _as_time(obj.get("timestamp"))
        if not isinstance(kind, str):
            yield refused('no type: a rollout line is {"timestamp": ..., "type": ..., "payload": {...}}')
            return
        if kind not in ROLLOUT_TYPES:
            yield refused(f"unknown rollout item type '{kind}' (known: {', '.join(ROLLOUT_TYPES)})")
            return
        if not isinstance(payload, dict):
            yield refused(f"{kind} payload is {_kind(payload)}, not an object")
            return
        item = payload.get("type")
        if kind in ("event_msg", "response_item") and not isinstance(item, str):
            yield refused(f"{kind} payload has no type")
            return
        if kind == "event_msg":  # shown to the user, repeating the response items: not a turn
            yield _skipped(f"event_msg:{item}", ts, number)
            return
        if kind != "response_item":  # session_meta, turn_context, compacted
            yield _skipped(kind, ts, number)
            return
        if item == "reasoning":  # kept in the metadata of the assistant turn it precedes
            summary = [s.get("text") for s in _list(payload.get("summary"))
                       if isinstance(s, dict) and isinstance(s.get("text"), str)]
            self.reasoning.append((number, ts, summary))
            return
        if item != "message" and item not in _CALLS and item not in _OUTPUTS:
            yield _skipped(f"response_item:{item}", ts, number)
            return
        self.seq += 1  # taken before anything refuses it: fixing the line later keeps the others' seqs
        turn = _turn(item, payload, self.calls)
        if isinstance(turn, str):
            problem = turn
        elif ts is None:
            problem = "no timestamp"
        elif self.session_id is None:
            problem = "no session id: no session_meta line names one, and the file name holds no uuid"
        elif self.user_id is None:
            problem = "no user id: a Codex rollout names none; set MEMORY_SOURCE_USER"
        else:
            problem = None
        if problem is not None or turn["role"] != "assistant":
            yield from self.flush()
        if problem is not None:
            yield refused(problem)
            return
        metadata = turn.pop("metadata")
        if turn["role"] == "assistant" and self.reasoning:
            # the reasoning lines merge into this turn: their summary only, never as content
            texts = [t for _, _, summary in self.reasoning for t in summary]
            metadata["reasoning"] = "\n\n".join(texts) or None
            self.reasoning = []
        if self.seq == 1:
            metadata["session"] = self.session or None
        role, content = turn.pop("role"), turn.pop("content")
        yield _message(self.session_id, self.user_id, self.seq, role, content, ts, metadata=metadata, **turn)

    def flush(self) -> Iterator[RawRecord]:
        """Reasoning no assistant turn took (the turn was refused or interrupted): skipped."""
        for number, ts, _ in self.reasoning:
            yield _skipped("response_item:reasoning", ts, number)
        self.reasoning = []


def _turn(item: str, payload: dict, calls: dict[str, Any]) -> dict | str:
    """Role, content, tool fields and metadata of a response item, or why it has none."""
    if item == "message":
        return _message_turn(payload)
    if item in _OUTPUTS:
        return _output_turn(item, payload, calls)
    call_id = payload.get("call_id") if isinstance(payload.get("call_id"), str) else None
    if item == "function_call":
        name, args = payload.get("name"), _tool_args(payload.get("arguments"))
        known = ("type", "name", "arguments", "call_id")
    elif item == "custom_tool_call":  # a freeform tool (apply_patch): its input is text, not JSON
        name, args = payload.get("name"), {"input": payload.get("input")}
        known = ("type", "name", "input", "call_id")
    else:  # local_shell_call, web_search_call: what to run or look up is the action
        action = payload.get("action")
        name = "local_shell" if item == "local_shell_call" else "web_search"
        args = action if isinstance(action, dict) else {"_raw": action}
        call_id = call_id or (payload.get("id") if item == "local_shell_call" and isinstance(payload.get("id"), str)
                              else None)
        known = ("type", "action", "call_id")
    if not isinstance(name, str) or not name:
        return f"{item} has no name"
    if call_id is not None:
        calls[call_id] = name
    return {"role": "assistant", "content": "", "tool_name": name, "tool_args": args, "tool_call_id": call_id,
            "metadata": {"tool_uses": [{"id": call_id, "name": name, "input": args}],
                         "item": _rest(payload, known)}}


def _message_turn(payload: dict) -> dict | str:
    role = payload.get("role")
    if role not in _ROLES:
        return (f"message role {json.dumps(role)} is none of user, assistant, developer, system"
                if role is not None else "message has no role")
    content = payload.get("content")
    if not isinstance(content, list):
        return f"message content is {_kind(content)}, not a list of parts"
    text, non_text = _text_of(content)
    harness = role == "user" and text.lstrip().lower().startswith(_HARNESS_PREFIXES)
    return {"role": _ROLES[role], "content": text,
            "metadata": {"speaker": "system" if harness else None,
                         "source_role": role if role == "developer" else None,
                         "non_text_parts": non_text or None,
                         "item": _rest(payload, ("type", "role", "content"))}}


def _output_turn(item: str, payload: dict, calls: dict[str, Any]) -> dict | str:
    """A tool's answer. A shell call's output is JSON text `{"output", "metadata": {"exit_code",
    …}}` (or text opening `Exit code: N`): the output is the content, a non-zero exit an error."""
    call_id = payload.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        return f"{item} has no call_id"
    output, exit_code, success, non_text = payload.get("output"), None, None, []
    if output is None:
        content = ""
    elif isinstance(output, str):
        content = output
        parsed = _json_object(output)
        if parsed is not None and isinstance(parsed.get("output"), str):
            content = parsed["output"]
            meta = parsed.get("metadata")
            exit_code = meta.get("exit_code") if isinstance(meta, dict) else None
        elif (match := _EXIT_CODE.match(output)) is not None:
            exit_code = int(match.group(1))
    elif isinstance(output, list):  # content items (an image the tool returned)
        content, non_text = _text_of(output)
    elif isinstance(output, dict) and isinstance(output.get("content"), str):  # {"content", "success"}
        content, success = output["content"], output.get("success")
    else:
        return f"{item} output is {_kind(output)}, not a string or a list of content items"
    failed = success is False or (isinstance(exit_code, int) and not isinstance(exit_code, bool) and exit_code != 0)
    return {"role": "tool", "content": content, "tool_call_id": call_id, "tool_name": calls.get(call_id),
            "metadata": {"is_error": True if failed else None,
                         "exit_code": exit_code if isinstance(exit_code, int) else None,
                         "non_text_parts": non_text or None,
                         "item": _rest(payload, ("type", "call_id", "output"))}}


def _json_object(text: str) -> dict | None:
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _rest(payload: dict, known: tuple[str, ...]) -> dict | None:
    """A response item's other fields (`status`, `id`, `phase`, …), kept as `_kept` keeps them."""
    return {k: _kept(v) for k, v in payload.items() if k not in known} or None

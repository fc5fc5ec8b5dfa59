"""How messages are shown to a model: a line per message, the speaker named, tool output
cut to a length per task; and a prompt's size in tokens, estimated without a tokenizer."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from memory_pipelines.records import Message
from memory_pipelines.rules.text import clip

TOOL_OUTPUT_CHARS = 500  # fact extraction's rendering (navi)
SUMMARY_TOOL_CHARS = 4000  # summaries read more of a tool's output: logs are often the point
# noise (a greeting, thanks, a repeat, a cancelled or failed turn) shows in a message's start
# and its tool's status: judging reads no more of each, on every day's every segment
JUDGE_MESSAGE_CHARS = 300
_WIDE = re.compile("[\u2e81-\U0010ffff]")  # CJK and beyond: about a token a character


def estimate_tokens(text: str) -> int:
    """About 4 characters a token for Latin text, one a character for CJK (no tokenizer
    is downloaded at run time)."""
    wide = 0 if text.isascii() else len(_WIDE.findall(text))
    return max(1, (len(text) - wide) // 4 + wide)


# a user turn someone other than the person wrote, as the prompts show it: the model must
# not take it for the user's own words (DISTILL says so); the person's turns are plain `User:`
SPEAKER_NOTES = {"agent": "written by an agent, not the person", "system": "harness notice, not the person",
                 "tool": "tool output, not the person"}


def render_message(m: Message, tool_chars: int = TOOL_OUTPUT_CHARS) -> str:
    if m.role == "user" and m.speaker != "human":
        return f"User ({SPEAKER_NOTES[m.speaker]}): {m.content}"
    if m.role == "tool":
        output = m.content if len(m.content) <= tool_chars else m.content[:tool_chars] + "…"
        status = " (failed)" if m.metadata.get("is_error") else ""
        return f"[Tool result] {m.tool_name or 'tool'}{status}: {output}"
    if m.role == "assistant" and m.tool_name:
        args = json.dumps(m.tool_args or {}, ensure_ascii=False, sort_keys=True)
        call = f"[Tool call] {m.tool_name}({args})"
        return f"Assistant: {m.content}\n{call}" if m.content.strip() else call
    return f"{m.role.capitalize()}: {m.content}"


def render_transcript(messages: Sequence[Message], tool_chars: int = TOOL_OUTPUT_CHARS) -> str:
    return "\n".join(render_message(m, tool_chars) for m in messages)


def render_for_judging(messages: Sequence[Message]) -> str:
    """A segment as the judging prompt shows it: a line per message, each cut to its start."""
    return "\n".join(clip(render_message(m), JUDGE_MESSAGE_CHARS) for m in messages)


def render_numbered(m: Message, tool_chars: int = TOOL_OUTPUT_CHARS) -> str:
    """A message as a line that starts with its seq in brackets, for answers that cite it."""
    return f"[{m.seq}] {render_message(m, tool_chars)}"


def render_chunk(messages: Sequence[Message]) -> str:
    """A summarized chunk as its distillation call reads it: numbered lines, long tool output cut."""
    return "\n".join(render_numbered(m, SUMMARY_TOOL_CHARS) for m in messages)

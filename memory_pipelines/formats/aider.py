"""aider: Aider's `.aider.chat.history.md`, the markdown log every run in a repository appends to.

As aider's `io.py` writes it: `# aider chat started at YYYY-MM-DD HH:MM:SS` (local time) opens a
run, a session; every line of what the user typed starts `#### ` (`user_input`); every line of
aider's own output starts `> ` (`tool_output`, `tool_error`, confirmations with their answer),
except the later lines of one multi-line output, written straight after it; the model's reply
(`ai_output`) is the markdown between, after a blank line. Each line ends in two spaces (a
markdown line break) but the reply's."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime

from memory_pipelines.formats.common import FormatOptions, RawRecord, _message, _skipped, _text
from memory_pipelines.records import QuarantineReason

HISTORY_SUFFIX = ".chat.history.md"  # aider's default `.aider.chat.history.md`, and any `<name>.chat.history.md`
_HEADER = re.compile(r"# aider chat started at (.*?)\s*\Z")
_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # how aider writes the start time (datetime.now(): local, no zone)
_FENCE = re.compile(r"\s*(`{3,}|~{3,})")


def is_history_name(name: str) -> bool:
    """Whether a file is an aider chat history by its name (case-insensitive)."""
    return name.lower().endswith(HISTORY_SUFFIX)


@dataclass
class _Turn:
    role: str
    line: int  # the first line of the turn: its record's line
    texts: list[str] = field(default_factory=list)


def _aider_records(data: bytes, options: FormatOptions) -> Iterator[RawRecord]:
    lines = _text(data).split("\n")
    lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    headers = [i for i, line in enumerate(lines) if _HEADER.match(line)]
    first = headers[0] if headers else len(lines)
    before = [i for i in range(first) if lines[i].strip()]
    if before:
        raw = "\n".join(lines[before[0]:before[-1] + 1])
        span = f"line {before[0] + 1}" if len(before) == 1 else f"lines {before[0] + 1}-{before[-1] + 1}"
        yield RawRecord(before[0] + 1, raw, len(raw.encode()), QuarantineReason.UNMAPPED,
                        f'aider: {span}: text before the first "# aider chat started at" header belongs to no '
                        "session (it has no start time)")
    seqs: Counter[str] = Counter()  # turns so far, by session: a start time written twice continues its session
    for start, end in zip(headers, [*headers[1:], len(lines)]):
        yield from _session(lines, start, end, options, seqs)


def _session(lines: list[str], start: int, end: int, options: FormatOptions,
             seqs: Counter[str]) -> Iterator[RawRecord]:
    written = _HEADER.match(lines[start]).group(1)
    try:
        started = datetime.strptime(written, _TIME_FORMAT).isoformat()
    except ValueError:
        raw = "\n".join(lines[start:end]).rstrip("\n")
        yield RawRecord(start + 1, raw, len(raw.encode()), QuarantineReason.UNMAPPED,
                        f"aider: line {start + 1}: the session's start time {written!r} is not YYYY-MM-DD HH:MM:SS")
        return
    # the run's start time names it: stable whatever the file is called or wherever it is moved
    session_id = f"aider@{started}"
    yield _skipped("chat_started", started, start + 1)
    for turn in _turns(lines, start + 1, end):
        seqs[session_id] += 1
        if options.user_id is None:
            raw = "\n".join(turn.texts)
            yield RawRecord(turn.line, raw, len(raw.encode()), QuarantineReason.UNMAPPED,
                            f"aider: line {turn.line}: no user id: an aider chat history names none; "
                            "set MEMORY_SOURCE_USER")
            continue
        record = _message(session_id, options.user_id, seqs[session_id], turn.role, _content(turn), started)
        yield RawRecord(turn.line, record.raw, record.raw_bytes)


def _turns(lines: list[str], start: int, end: int) -> Iterator[_Turn]:
    """The session's turns in order: runs of `#### ` lines (the user), runs of `> ` lines with
    the unmarked lines written straight after one (aider), and what lies between (the model)."""
    turn: _Turn | None = None
    i = start
    while i < end:
        line = lines[i]
        kind = _kind_of(line)
        if kind == "blank":
            if turn is not None and turn.role == "assistant":
                turn.texts.append(line)
            elif turn is not None:  # a blank line ends what the user typed or aider said
                yield turn
                turn = None
            i += 1
            continue
        if kind == "text" and turn is not None and turn.role == "tool":
            kind = "tool"  # a multi-line tool_output: only its first line got the `> `
        role = "assistant" if kind == "text" else kind
        if turn is None or turn.role != role:
            if turn is not None:
                yield turn
            turn = _Turn(role, i + 1)
        if role == "assistant":
            close = _closing_fence(lines, i, end)
            # a fenced block of the reply (a SEARCH/REPLACE edit of a markdown file) may hold
            # lines that look like the user's or aider's: they are the reply's
            turn.texts.extend(lines[i:close + 1])
            i = close + 1
            continue
        turn.texts.append(line)
        i += 1
    if turn is not None:
        yield turn


def _kind_of(line: str) -> str:
    if not line.strip():
        return "blank"
    if line.rstrip() == "####" or line.startswith("#### "):
        return "user"
    if line.rstrip() == ">" or line.startswith("> "):
        return "tool"
    return "text"


def _closing_fence(lines: list[str], at: int, end: int) -> int:
    """The line closing the fence line `at` opens, when one does before the session ends;
    otherwise `at` itself (an unclosed fence, a reply cut off, fences nothing)."""
    opened = _FENCE.match(lines[at])
    if opened is None:
        return at
    marker = opened.group(1)
    for j in range(at + 1, end):
        closing = _FENCE.match(lines[j])
        if closing is not None and closing.group(1)[0] == marker[0] and len(closing.group(1)) >= len(marker) \
                and not lines[j].strip()[len(closing.group(1)):].strip():
            return j
    return at


def _content(turn: _Turn) -> str:
    if turn.role == "assistant":  # ai_output writes the reply stripped
        texts = list(turn.texts)
        while texts and not texts[-1].strip():
            texts.pop()
        return "\n".join(texts)
    prefix = "####" if turn.role == "user" else ">"
    texts = []
    for line in turn.texts:
        if line.startswith(prefix):
            line = line[len(prefix):]
            line = line[1:] if line.startswith(" ") else line
        # the markdown line break aider ends each line with
        texts.append(line[:-2] if line.endswith("  ") else line)
    return "\n".join(texts)

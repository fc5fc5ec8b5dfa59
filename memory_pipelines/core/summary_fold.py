"""Rolling session summaries with cursors (the Agenvoy design), as a deterministic fold.

A session's summary history is a fold over the UTC days that hold its messages. Each day
step takes the kept messages newer than the cursor and older than the day's end, trims
the previous summary of entries the new segments overturn (decision model), cuts the
messages into chunks of at most `chunk_chars` that never end on a user message, and makes
one distillation call per chunk: the new summary and the chunk's facts, knowledge entries
and relations in one answer. Every chunk gives a version (summary + cursor + those items,
which the facts and knowledge stages read instead of calling a model again).

Each version carries a fingerprint chained from the previous one over everything its
day depends on. Re-running a day whose inputs did not change reuses the stored versions
without a model call; a day whose inputs changed (a late transcript, a new judgement)
discards its versions and every later one, and is rebuilt forward — so a backfill or a
late file ends in the same versions as processing every day once, in order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from memory_pipelines.config import SPECS
from memory_pipelines.digests import json_digest
from memory_pipelines.llm.backends import ModelBackend, ModelCall, ModelError
from memory_pipelines.llm.rendering import SUMMARY_TOOL_CHARS, render_numbered
from memory_pipelines.llm.prompts import DISTILL, FIND_OVERTURNED
from memory_pipelines.records import Message, Summary

SUMMARY_CHUNK_CHARS = SPECS["MEMORY_SUMMARY_CHUNK_CHARS"].default
ELISION = "\n[… {n} characters elided …]\n"


def rendered_length(message: Message) -> int:
    """Characters a message takes in a distillation call's transcript (with its newline)."""
    return len(render_numbered(message, SUMMARY_TOOL_CHARS)) + 1


def _fit(message: Message, limit: int) -> Message:
    """Cap one message so that any message and the next fit together in a chunk."""
    overflow = rendered_length(message) - 1 - limit
    if overflow <= 0:
        return message
    keep = max(0, len(message.content) - overflow - len(ELISION) - 8)
    head, tail = message.content[: keep // 2], message.content[len(message.content) - keep // 2 :]
    return replace(message, content=head + ELISION.format(n=len(message.content) - len(head) - len(tail)) + tail)


def chunk_messages(messages: Sequence[Message], chunk_chars: int = SUMMARY_CHUNK_CHARS
                   ) -> tuple[list[tuple[Message, ...]], tuple[Message, ...]]:
    """Cut kept messages into chunks of at most `chunk_chars` rendered characters; a chunk
    never ends on a user message. Returns (chunks, leftover): the leftover is the trailing
    user messages still waiting for a reply, summarized once it comes."""
    per_message = (chunk_chars - 2) // 2
    fitted = [_fit(m, per_message) for m in messages]
    while fitted and fitted[-1].role == "user":
        fitted.pop()
    leftover = tuple(messages[len(fitted):])
    chunks: list[tuple[Message, ...]] = []
    current: list[Message] = []
    size = 0
    for message in fitted:
        length = rendered_length(message)
        if current and size + length > chunk_chars:
            # move the trailing user messages of the full chunk to the next one
            cut = len(current)
            while cut > 0 and current[cut - 1].role == "user":
                cut -= 1
            if cut == 0:  # a run of user messages longer than a chunk, with no reply between
                cut = len(current)
            chunks.append(tuple(current[:cut]))
            current = current[cut:]
            size = sum(rendered_length(m) for m in current)
        current.append(message)
        size += length
    if current:
        chunks.append(tuple(current))
    return chunks, leftover


@dataclass(frozen=True)
class SummaryState:
    summary: Summary | None = None
    cursor_seq: int | None = None
    cursor_ts: datetime | None = None
    version: int = 0
    fingerprint: str = ""


@dataclass(frozen=True)
class StoredVersion:
    version: int
    partition_key: str
    step: int
    step_count: int
    fingerprint: str
    summary: Summary
    cursor_seq: int
    cursor_ts: datetime


@dataclass(frozen=True)
class Day:
    partition_key: str
    end: datetime  # exclusive
    dropped_seqs: frozenset[int] = frozenset()


@dataclass(frozen=True)
class SummaryVersion:
    session_id: str
    user_id: str
    version: int
    partition_key: str
    step: int
    step_count: int
    kind: str  # chunk | trim | cursor_only
    summary: Summary
    cursor_seq: int
    cursor_ts: datetime
    first_seq: int | None
    last_seq: int | None
    messages_in: int
    trimmed: tuple[str, ...]
    backend: str
    model: str
    prompt_version: str
    fingerprint: str
    memory_items: dict[str, Any] | None = None  # a chunk's facts, entries and relations, as written
    call_id: str | None = None  # the distillation call that wrote it


@dataclass(frozen=True)
class VersionBuilt:
    version: SummaryVersion
    calls: tuple[ModelCall, ...] = ()


@dataclass(frozen=True)
class VersionsReused:
    partition_key: str
    count: int


@dataclass(frozen=True)
class DiscardFrom:
    """Stored versions from this (day, step) on no longer follow from their inputs."""

    partition_key: str
    step: int


@dataclass(frozen=True)
class FoldStopped:
    """A model call failed: later chunks are not called; the next run resumes here."""

    partition_key: str
    step: int
    calls: tuple[ModelCall, ...]
    reason: str


@dataclass
class FoldPlan:
    session_id: str
    user_id: str
    start: SummaryState
    days: list[Day]
    messages: list[Message]  # the session's messages newer than start.cursor_seq, by seq
    stored: list[StoredVersion] = field(default_factory=list)  # versions on or after the first day


def _hash(*parts: object) -> str:
    return json_digest(parts, sort_keys=True, default=str)


def fold_session(plan: FoldPlan, summarizer: ModelBackend, decider: ModelBackend, language: str,
                 chunk_chars: int = SUMMARY_CHUNK_CHARS) -> Iterator[object]:
    """Bring one session's summary versions up to date over `plan.days`, in order."""
    state = plan.start
    stored = {(v.partition_key, v.step): v for v in plan.stored}
    summarizer_id = (summarizer.name, summarizer.model, summarizer.prompt_version(DISTILL))
    decider_id = (decider.name, decider.model, decider.prompt_version(FIND_OVERTURNED))
    for day in plan.days:
        new = [m for m in plan.messages
               if (state.cursor_seq is None or m.seq > state.cursor_seq) and m.ts < day.end and m.role != "system"]
        steps = list(_day_steps(state, new, day, chunk_chars)) if new else []
        if not steps:
            # nothing to summarize this day (any more): versions stored for it are stale
            if any(key >= day.partition_key for key, _ in stored):
                yield DiscardFrom(day.partition_key, 0)
                stored = {k: v for k, v in stored.items() if k[0] < day.partition_key}
            continue
        day_fp = _hash(state.fingerprint, day.partition_key, summarizer_id, decider_id, language, chunk_chars,
                       state.cursor_seq is None and state.summary is not None,
                       [(m.seq, m.content_hash, m.seq in day.dropped_seqs) for m in new])
        # reuse the stored versions that still follow from their inputs
        reused = 0
        for number, (kind, *_rest) in enumerate(steps):
            step_no = 0 if kind != "chunk" else _rest[0]
            version = stored.get((day.partition_key, step_no))
            if version is None or version.fingerprint != _hash(day_fp, step_no):
                break
            state = SummaryState(version.summary, version.cursor_seq, version.cursor_ts, version.version,
                                 version.fingerprint)
            reused = number + 1
        if reused:
            yield VersionsReused(day.partition_key, reused)
        if reused == len(steps):
            continue
        first_step = steps[reused][1] if steps[reused][0] == "chunk" else 0
        if any((key, step) >= (day.partition_key, first_step) for key, step in stored):
            yield DiscardFrom(day.partition_key, first_step)
            stored = {k: v for k, v in stored.items() if k < (day.partition_key, first_step)}
        for kind, *args in steps[reused:]:
            outcome = yield from _run_step(plan, state, day, day_fp, kind, args, len(steps), summarizer, decider,
                                           summarizer_id, language)
            if outcome is None:
                return
            state = outcome


def _day_steps(state: SummaryState, new: list[Message], day: Day, chunk_chars: int):
    """The steps a day needs: ("cursor_only", cursor_msg), ("trim", cursor_msg) or
    ("chunk", n, chunk, cursor_msg, kept): `kept` is what the decision step reads before chunk 1."""
    if state.summary is not None and state.cursor_seq is None:
        yield ("cursor_only", max(new, key=lambda m: m.seq))
        return
    kept = [m for m in new if m.seq not in day.dropped_seqs]
    chunks, leftover = chunk_messages(kept, chunk_chars)
    limit = leftover[0].seq if leftover else None
    covered = [m for m in new if limit is None or m.seq < limit]
    if not chunks:
        if covered and (state.cursor_seq is None or max(m.seq for m in covered) > state.cursor_seq):
            yield ("trim", max(covered, key=lambda m: m.seq))
        return
    for number, chunk in enumerate(chunks, start=1):
        if number < len(chunks):
            next_first = chunks[number][0].seq
            cursor = max((m for m in covered if m.seq < next_first), key=lambda m: m.seq)
        else:
            cursor = max(covered, key=lambda m: m.seq)
        yield ("chunk", number, chunk, cursor, tuple(kept))


def _run_step(plan, state, day, day_fp, kind, args, step_count, summarizer, decider, summarizer_id, language):
    """Run one step; returns the new state, or None after yielding FoldStopped."""
    previous = state.summary or Summary(language=language)
    calls: list[ModelCall] = []
    trimmed: tuple[str, ...] = ()
    base = dict(session_id=plan.session_id, user_id=plan.user_id, version=state.version + 1,
                partition_key=day.partition_key, step_count=step_count)
    if kind == "cursor_only":
        (cursor,) = args
        built = SummaryVersion(**base, step=0, kind=kind, summary=previous, cursor_seq=cursor.seq, cursor_ts=cursor.ts,
                               first_seq=None, last_seq=None, messages_in=0, trimmed=(), backend="none",
                               model="none", prompt_version="none", fingerprint=_hash(day_fp, 0))
    else:
        if kind == "trim":
            (cursor,) = args
            step, chunk, kept = 0, (), ()
        else:
            step, chunk, cursor, kept = args
        if step == 1 and not previous.is_empty:
            try:
                gone, call = decider.find_overturned(previous, kept)
                calls.append(call)
                trimmed = tuple(e for e in (*previous.key_decisions, *previous.past_discussions) if e in gone)
                previous = replace(previous,
                                   key_decisions=tuple(e for e in previous.key_decisions if e not in gone),
                                   past_discussions=tuple(e for e in previous.past_discussions if e not in gone))
            except ModelError as exc:
                # stopped like a failed chunk: a version that kept overturned entries would
                # never be built again, so the retry or the next run redoes this step
                calls.append(exc.call)
                yield FoldStopped(day.partition_key, step, tuple(calls), str(exc))
                return None
        items, call_id = None, None
        if kind == "trim":
            summary, who = previous, ("none", "none", "none")
        else:
            try:
                distilled, call = summarizer.distill(previous, chunk, language)
                calls.append(call)
            except ModelError as exc:
                calls.append(exc.call)
                yield FoldStopped(day.partition_key, step, tuple(calls), str(exc))
                return None
            summary, items, call_id, who = distilled.summary, distilled.items_json(), call.call_id, summarizer_id
        built = SummaryVersion(**base, step=step, kind=kind, summary=summary, cursor_seq=cursor.seq,
                               cursor_ts=cursor.ts, first_seq=chunk[0].seq if chunk else None,
                               last_seq=chunk[-1].seq if chunk else None, messages_in=len(chunk), trimmed=trimmed,
                               backend=who[0], model=who[1], prompt_version=who[2], fingerprint=_hash(day_fp, step),
                               memory_items=items, call_id=call_id)
    yield VersionBuilt(built, tuple(calls))
    return SummaryState(built.summary, built.cursor_seq, built.cursor_ts, built.version, built.fingerprint)

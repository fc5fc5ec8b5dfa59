"""Filtered segments: cut a session's messages into segments and judge which are noise."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memory_pipelines.digests import json_digest
from memory_pipelines.llm.backends import ModelBackend, ModelCall, ModelError

from memory_pipelines.llm.rendering import estimate_tokens, render_for_judging
from memory_pipelines.llm.prompts import JUDGE_SEGMENTS
from memory_pipelines.records import Message, NoiseVerdict, Segment
from memory_pipelines.rules.noise import DROP_THRESHOLD


def cut_segments(messages: Sequence[Message]) -> list[Segment]:
    """One session's messages (any order) → segments in seq order. System messages are
    instructions, not conversation, and belong to no segment."""
    segments: list[list[Message]] = []
    for message in sorted(messages, key=lambda m: m.seq):
        if message.role == "system":
            continue
        if message.role == "user" or not segments:
            segments.append([message])
        else:
            segments[-1].append(message)
    return [Segment(group[0].session_id, group[0].user_id, tuple(group)) for group in segments]


def judgement_fingerprint(segments: Sequence[Segment], backend: ModelBackend) -> str:
    """Everything a judgement depends on: the messages and who judges them with what prompt."""
    payload = {
        "judge": [backend.name, backend.model, backend.prompt_version(JUDGE_SEGMENTS)],
        "segments": [[(m.seq, m.content_hash) for m in s.messages] for s in segments],
    }
    return json_digest(payload, sort_keys=True)


@dataclass(frozen=True)
class JudgedSegment:
    segment: Segment
    verdict: NoiseVerdict
    status: str  # ok | failed
    error: str | None = None
    evident: bool = False  # kept by rule, no judge asked (`evidently_kept`)

    @property
    def dropped(self) -> bool:
        return self.status == "ok" and self.verdict.noise and self.verdict.confidence >= DROP_THRESHOLD


@dataclass(frozen=True)
class SessionJudgement:
    fingerprint: str
    judged: tuple[JudgedSegment, ...]
    call: ModelCall | None  # None: every segment was evidently kept, no judge asked


MISSING_VERDICT = "the answer gave no verdict for this segment"
KEPT = NoiseVerdict(False, 0.0)
EVIDENTLY_KEPT = NoiseVerdict(False, 1.0)


def evidently_kept(segment: Segment) -> bool:
    """A segment with a successful tool result: never noise by the judging prompt's own rule
    (a tool result is not noise). No judge is asked about it, which keeps the tool output out
    of every day's judging prompts."""
    return any(m.role == "tool" and not m.metadata.get("is_error") for m in segment.messages)


def judge_sessions(sessions: Sequence[Sequence[Segment]], backend: ModelBackend) -> list[SessionJudgement]:
    """Judge several sessions' segments of a window in one call, all sharing it (the
    evidently kept ones are not asked about). If judging fails, every segment asked about is
    kept (and marked failed, so a later run judges it again); a segment the answer left out
    is kept and marked failed the same way."""
    fingerprints = [judgement_fingerprint(segments, backend) for segments in sessions]
    asked = [[s for s in segments if not evidently_kept(s)] for segments in sessions]
    call: ModelCall | None = None
    verdicts: dict[str, JudgedSegment] = {}
    if any(asked):
        try:
            answered, call = backend.judge_sessions([a for a in asked if a])
            verdicts = {s.segment_id: JudgedSegment(s, v, "ok") if v is not None
                        else JudgedSegment(s, KEPT, "failed", MISSING_VERDICT)
                        for segments, found in zip([a for a in asked if a], answered)
                        for s, v in zip(segments, found)}
        except ModelError as exc:
            call = exc.call
            verdicts = {s.segment_id: JudgedSegment(s, KEPT, "failed", exc.call.error) for a in asked for s in a}
    return [SessionJudgement(fp, tuple(verdicts.get(s.segment_id) or JudgedSegment(s, EVIDENTLY_KEPT, "ok",
                                                                                   evident=True)
                                       for s in segments), call)
            for fp, segments in zip(fingerprints, sessions)]


def judge_session(segments: Sequence[Segment], backend: ModelBackend) -> SessionJudgement:
    """Judge one session's segments of a window in one call."""
    return judge_sessions([segments], backend)[0]


# An answer's length grows with the segments asked about: cap them as well as the prompt.
MAX_SEGMENTS_PER_CALL = 100


def pack_sessions(sessions: Sequence[Sequence[Segment]], batch_tokens: int,
                  share: str = "day") -> list[list[Sequence[Segment]]]:
    """Consecutive sessions grouped into judging calls of at most `batch_tokens` prompt
    tokens (estimated) and MAX_SEGMENTS_PER_CALL segments; a session is never split, and one
    larger than the limit gets a call of its own. 0 tokens or `share` "session": one session
    per call; `share` "user": a call holds one user's sessions only (they are grouped by
    user first, in order of each user's first session)."""
    if share == "user":
        by_user: dict[str, list[Sequence[Segment]]] = {}
        for segments in sessions:
            by_user.setdefault(segments[0].messages[0].user_id, []).append(segments)
        return [batch for own in by_user.values() for batch in pack_sessions(own, batch_tokens)]
    batches: list[list[Sequence[Segment]]] = []
    tokens = count = 0
    for segments in sessions:
        size = sum(estimate_tokens(render_for_judging(s.messages)) for s in segments if not evidently_kept(s))
        if (not batches or share == "session" or tokens + size > batch_tokens
                or count + len(segments) > MAX_SEGMENTS_PER_CALL):
            batches.append([])
            tokens = count = 0
        batches[-1].append(segments)
        tokens += size
        count += len(segments)
    return batches

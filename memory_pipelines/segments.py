"""Filtered segments: cut a session's messages into segments and judge which are noise."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from memory_pipelines.llm.backends import ModelBackend, ModelCall, ModelError
from memory_pipelines.llm.prompts import JUDGE_SEGMENTS
from memory_pipelines.models import Message, NoiseVerdict, Segment
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
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class JudgedSegment:
    segment: Segment
    verdict: NoiseVerdict
    status: str  # ok | failed
    error: str | None = None

    @property
    def dropped(self) -> bool:
        return self.status == "ok" and self.verdict.noise and self.verdict.confidence >= DROP_THRESHOLD


@dataclass(frozen=True)
class SessionJudgement:
    fingerprint: str
    judged: tuple[JudgedSegment, ...]
    call: ModelCall


def judge_session(segments: Sequence[Segment], backend: ModelBackend) -> SessionJudgement:
    """Judge one session's segments of a window in one call. If judging fails, every
    segment is kept (and marked failed, so a later run judges it again)."""
    fingerprint = judgement_fingerprint(segments, backend)
    try:
        verdicts, call = backend.judge_segments(segments)
    except ModelError as exc:
        kept = NoiseVerdict(False, 0.0)
        return SessionJudgement(fingerprint, tuple(JudgedSegment(s, kept, "failed", exc.call.error) for s in segments),
                                exc.call)
    return SessionJudgement(fingerprint, tuple(JudgedSegment(s, v, "ok") for s, v in zip(segments, verdicts)), call)

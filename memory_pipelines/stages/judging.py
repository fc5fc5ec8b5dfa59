"""Judging segments, the step two stages share: `conversation_segments` judges each day's
sessions, `session_summaries` makes sure every day it folds was judged on its current
inputs before folding it. Not a stage: no asset of its own."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg

from memory_pipelines.core.noise_filter import (
    MISSING_VERDICT, SessionJudgement, cut_segments, judge_session, judgement_fingerprint,
)
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.llm.backends import ModelBackend, ModelCall
from memory_pipelines.llm.prompts import JUDGE_SEGMENTS
from memory_pipelines.records import Message
from memory_pipelines.stages.common import CallContext, Counts, StageFailure, StageReport


@dataclass
class SegmentCounts(Counts):
    sessions: int = 0
    segments_judged: int = 0
    segments_evidently_kept: int = 0  # a successful tool result: kept by rule, no judge asked
    segments_dropped: int = 0
    segments_unchanged: int = 0
    judging_failed: int = 0
    judge_calls_shared: int = 0
    dropped_by_reason: Counter = field(default_factory=Counter)


def segment_report() -> StageReport[SegmentCounts]:
    return StageReport(SegmentCounts(), calls_models=True)


def store_judgements(conn: psycopg.Connection, judged_days: Sequence[tuple[str, SessionJudgement]],
                     judge: ModelBackend, ctx: CallContext) -> StageReport[SegmentCounts]:
    """Replace each (partition key, judgement)'s session-day's segments with the judgement's,
    all in one write. Runs inside the caller's transaction."""
    summaries_db.replace_segments(conn, judged_days, ctx.run_id,
                                  (judge.name, judge.model, judge.prompt_version(JUDGE_SEGMENTS)))
    report = segment_report()
    for partition_key, judgement in judged_days:
        report.merge(_judgement_report(partition_key, judgement))
    return report


def _judgement_report(partition_key: str, judgement: SessionJudgement) -> StageReport[SegmentCounts]:
    report = segment_report()
    counts = report.counts
    session_id = judgement.judged[0].segment.session_id
    for judged in judgement.judged:
        counts.segments_judged += 1
        counts.segments_evidently_kept += judged.evident
        counts.segments_dropped += judged.dropped
        counts.judging_failed += judged.status == "failed"
        if judged.dropped:
            counts.dropped_by_reason[judged.verdict.reason] += 1
        report.preview.append({
            "segment": judged.segment.segment_id, "messages": len(judged.segment.messages),
            "dropped": judged.dropped, "reason": judged.verdict.reason, "confidence": judged.verdict.confidence,
            "first": judged.segment.messages[0].content,
        })
    failed = sum(j.status == "failed" for j in judgement.judged)
    if judgement.call is not None and judgement.call.status != "ok":
        report.failures.append(StageFailure(session_id, partition_key,
                                            f"judging failed, all kept: {judgement.call.describe()}",
                                            judgement.call.budget_reached))
    elif failed:
        report.failures.append(StageFailure(session_id, partition_key,
                                            f"{failed} segments kept unjudged: {MISSING_VERDICT}"))
    return report


def ensure_judged(conn: psycopg.Connection, days: Sequence[tuple[str, str, Sequence[Message]]], judge: ModelBackend,
                  ctx: CallContext) -> StageReport[SegmentCounts]:
    """Judge each (session, partition key, its messages)'s segments unless the stored
    judgement already follows from the same inputs (the summaries stage asks this of every
    day it folds). Runs inside the caller's transaction."""
    report = segment_report()
    cut = [(session_id, key, segments) for session_id, key, messages in days if (segments := cut_segments(messages))]
    current = summaries_db.current_judgements(conn, [(session_id, key) for session_id, key, _ in cut])
    judged: list[tuple[str, SessionJudgement]] = []
    calls: list[tuple[ModelCall, str, str]] = []
    for session_id, key, segments in cut:
        if current.get((session_id, key)) == judgement_fingerprint(segments, judge):
            report.counts.segments_unchanged += len(segments)
            continue
        judgement = judge_session(segments, judge)
        judged.append((key, judgement))
        if judgement.call is not None:
            calls.append((judgement.call, key, session_id))
    report.merge(store_judgements(conn, judged, judge, ctx))
    ctx.record_all(conn, calls)
    report.calls += [call for call, _, _ in calls]
    return report

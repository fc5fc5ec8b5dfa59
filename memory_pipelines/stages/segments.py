"""Stage `conversation_segments`: each day's messages cut into segments and judged, noise
marked dropped with its reason. A session-day whose inputs did not change is not judged again."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.db import repository
from memory_pipelines.llm.backends import ModelBackend
from memory_pipelines.llm.prompts import JUDGE_SEGMENTS
from memory_pipelines.records import Message, Segment
from memory_pipelines.segments import (
    MISSING_VERDICT, SessionJudgement, cut_segments, judge_session, judge_sessions, judgement_fingerprint,
    pack_sessions,
)
from memory_pipelines.stages.common import (
    Backends, CallContext, Counts, StageFailure, StageReport, Window, run_parallel,
)

ASSET = "conversation_segments"


@dataclass(frozen=True)
class Settings:
    concurrency: int = 1  # judging calls in flight at once


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


def _report() -> StageReport[SegmentCounts]:
    return StageReport(SegmentCounts(), calls_models=True)


def store_judgement(conn: psycopg.Connection, partition_key: str, judgement: SessionJudgement,
                    judge: ModelBackend, ctx: CallContext) -> StageReport[SegmentCounts]:
    """Replace a session-day's segments with a judgement. Runs inside the caller's transaction."""
    report = _report()
    counts = report.counts
    session_id = judgement.judged[0].segment.session_id
    repository.replace_segments(conn, judgement, partition_key, ctx.run_id,
                                (judge.name, judge.model, judge.prompt_version(JUDGE_SEGMENTS)))
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
    report = _report()
    cut = [(session_id, key, segments) for session_id, key, messages in days if (segments := cut_segments(messages))]
    current = repository.current_judgements(conn, [(session_id, key) for session_id, key, _ in cut])
    for session_id, key, segments in cut:
        if current.get((session_id, key)) == judgement_fingerprint(segments, judge):
            report.counts.segments_unchanged += len(segments)
            continue
        judgement = judge_session(segments, judge)
        report.merge(store_judgement(conn, key, judgement, judge, ctx))
        if judgement.call is not None:
            ctx.record(conn, [judgement.call], key, session_id)
            report.calls.append(judgement.call)
    return report


def run(pool: ConnectionPool, window: Window, settings: Settings, backends: Backends) -> StageReport[SegmentCounts]:
    """Every non-temp session's segments of each day, judged. The sessions whose judgement
    is not current share calls (`batch_tokens` and `share` of the decision model's
    configuration): a segment is short, and a call per session is most of the cost."""
    judge = backends.judge
    ctx = CallContext(window.run_id, ASSET)
    report = _report()
    for key, day in window.days(ASSET, only=window.active_days(pool)):
        pending: list[list[Segment]] = []
        with pool.connection() as conn:
            by_session = repository.messages_in_window(conn, day, window.shard)
            current = repository.current_judgements(conn, [(session_id, key) for session_id in by_session])
            for session_id, messages in sorted(by_session.items()):
                segments = cut_segments(messages)
                if not segments:
                    continue
                if current.get((session_id, key)) == judgement_fingerprint(segments, judge):
                    report.counts.segments_unchanged += len(segments)
                else:
                    pending.append(segments)

        def judge_batch(batch: list[Sequence[Segment]], key=key) -> StageReport[SegmentCounts]:
            part = _report()
            judgements = judge_sessions(batch, judge)
            calls = [c for c in (judgements[0].call,) if c is not None]
            part.calls += calls
            part.counts.judge_calls_shared += len(batch) > 1 and bool(calls)
            with pool.connection() as conn, conn.transaction():
                ctx.record(conn, calls, key, batch[0][0].session_id if len(batch) == 1 else None)
                ids = [j.judged[0].segment.session_id for j in judgements]
                repository.lock_sessions(conn, ids)
                # a concurrent run may have stored the same judgement while this one asked
                current = repository.current_judgements(conn, [(session_id, key) for session_id in ids])
                with conn.pipeline():  # the writes wait on no answer: one round trip for the batch
                    for session_id, judgement in zip(ids, judgements):
                        if current.get((session_id, key)) != judgement.fingerprint:
                            part.merge(store_judgement(conn, key, judgement, judge, ctx))
            return part

        batches = pack_sessions(pending, judge.config.batch_tokens, judge.config.share)
        run_parallel(batches, judge_batch, report, settings.concurrency)
        report.counts.sessions += len(by_session)
    return report

"""Stage `conversation_segments`: each day's messages cut into segments and judged, noise
marked dropped with its reason. A session-day whose inputs did not change is not judged again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from memory_pipelines.core.noise_filter import cut_segments, judge_sessions, judgement_fingerprint, pack_sessions
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.records import Segment
from memory_pipelines.stages.common import Backends, CallContext, StageReport, Window, run_parallel
from memory_pipelines.stages.judging import SegmentCounts, segment_report, store_judgement

ASSET = "conversation_segments"


@dataclass(frozen=True)
class Settings:
    concurrency: int = 1  # judging calls in flight at once


def run(pool: ConnectionPool, window: Window, settings: Settings, backends: Backends) -> StageReport[SegmentCounts]:
    """Every non-temp session's segments of each day, judged. The sessions whose judgement
    is not current share calls (`batch_tokens` and `share` of the decision model's
    configuration): a segment is short, and a call per session is most of the cost."""
    judge = backends.judge
    ctx = CallContext(window.run_id, ASSET)
    report = segment_report()
    for key, day in window.days(ASSET, only=window.active_days(pool)):
        pending: list[list[Segment]] = []
        with pool.connection() as conn:
            by_session = summaries_db.messages_in_window(conn, day, window.shard)
            current = summaries_db.current_judgements(conn, [(session_id, key) for session_id in by_session])
            for session_id, messages in sorted(by_session.items()):
                segments = cut_segments(messages)
                if not segments:
                    continue
                if current.get((session_id, key)) == judgement_fingerprint(segments, judge):
                    report.counts.segments_unchanged += len(segments)
                else:
                    pending.append(segments)

        def judge_batch(batch: list[Sequence[Segment]], key=key) -> StageReport[SegmentCounts]:
            part = segment_report()
            judgements = judge_sessions(batch, judge)
            calls = [c for c in (judgements[0].call,) if c is not None]
            part.calls += calls
            part.counts.judge_calls_shared += len(batch) > 1 and bool(calls)
            with pool.connection() as conn, conn.transaction():
                ctx.record(conn, calls, key, batch[0][0].session_id if len(batch) == 1 else None)
                ids = [j.judged[0].segment.session_id for j in judgements]
                summaries_db.lock_sessions(conn, ids)
                # a concurrent run may have stored the same judgement while this one asked
                current = summaries_db.current_judgements(conn, [(session_id, key) for session_id in ids])
                with conn.pipeline():  # the writes wait on no answer: one round trip for the batch
                    for session_id, judgement in zip(ids, judgements):
                        if current.get((session_id, key)) != judgement.fingerprint:
                            part.merge(store_judgement(conn, key, judgement, judge, ctx))
            return part

        batches = pack_sessions(pending, judge.config.batch_tokens, judge.config.share)
        run_parallel(batches, judge_batch, report, settings.concurrency)
        report.counts.sessions += len(by_session)
    return report

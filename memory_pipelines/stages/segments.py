"""Stage `conversation_segments`: each day's messages cut into segments and judged, noise
marked dropped with its reason. A session-day whose inputs did not change is not judged again."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from memory_pipelines.core.noise_filter import cut_segments, judge_sessions, judgement_fingerprint, pack_sessions
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.records import Segment
from memory_pipelines.stages.common import (
    COMMIT_SECONDS, Backends, CallContext, Slices, StageReport, Window, map_in_order,
)
from memory_pipelines.stages.judging import SegmentCounts, segment_report, store_judgements

ASSET = "conversation_segments"


@dataclass(frozen=True)
class Settings:
    concurrency: int = 1  # judging calls in flight at once


def run(pool: ConnectionPool, window: Window, settings: Settings, backends: Backends) -> StageReport[SegmentCounts]:
    """Every non-temp session's segments of each day, judged. The sessions whose judgement
    is not current share calls (`batch_tokens` and `share` of the decision model's
    configuration): a segment is short, and a call per session is most of the cost. Calls
    run `concurrency` at a time; each batch's judgement is stored as it comes, batches
    sharing a commit for up to COMMIT_SECONDS (each at once under a token budget, which
    counts the calls committed)."""
    judge = backends.judge
    ctx = CallContext(window.run_id, ASSET)
    report = segment_report()
    with pool.connection() as conn, Slices(conn, 0.0 if judge.config.token_budget else COMMIT_SECONDS) as slices:
        for key, day in window.days(ASSET, only=window.active_days(pool)):
            pending: list[list[Segment]] = []
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
            batches = pack_sessions(pending, judge.config.batch_tokens, judge.config.share)
            for batch, judgements in zip(batches, map_in_order(batches, lambda b: judge_sessions(b, judge),
                                                               settings.concurrency)):
                calls = [c for c in (judgements[0].call,) if c is not None]
                report.calls += calls
                report.counts.judge_calls_shared += len(batch) > 1 and bool(calls)
                ids = [j.judged[0].segment.session_id for j in judgements]
                with slices.item(ids):
                    ctx.record(conn, calls, key, batch[0][0].session_id if len(batch) == 1 else None)
                    # a concurrent run may have stored the same judgement while this one asked
                    stored = summaries_db.current_judgements(conn, [(session_id, key) for session_id in ids])
                    report.merge(store_judgements(conn, [
                        (key, judgement) for session_id, judgement in zip(ids, judgements)
                        if stored.get((session_id, key)) != judgement.fingerprint], judge, ctx))
            report.counts.sessions += len(by_session)
    return report

"""Running the model stages against the database: read through the repository, call the
pure stage, write what it produced. No Dagster here; the assets call these."""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.db import repository
from memory_pipelines.llm.backends import ModelBackend, ModelCall
from memory_pipelines.llm.prompts import JUDGE_SEGMENTS
from memory_pipelines.models import Message, TimeWindow
from memory_pipelines.segments import cut_segments, judge_session, judgement_fingerprint
from memory_pipelines.summaries import (
    SUMMARY_CHUNK_CHARS, Day, DiscardFrom, FoldPlan, FoldStopped, VersionBuilt, VersionsReused, fold_session,
)

log = logging.getLogger(__name__)
ONE_DAY = timedelta(days=1)


@dataclass
class StageReport:
    """What a stage did, for materialization metadata."""

    counts: Counter = field(default_factory=Counter)
    calls: list[ModelCall] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    preview: list[dict] = field(default_factory=list)

    def merge(self, other: "StageReport") -> None:
        self.counts.update(other.counts)
        self.calls.extend(other.calls)
        self.failures.extend(other.failures)
        self.preview.extend(other.preview)


@dataclass(frozen=True)
class CallContext:
    run_id: str
    asset: str


def _day_window(partition_key: str) -> TimeWindow:
    start = datetime.fromisoformat(partition_key).replace(tzinfo=UTC)
    return TimeWindow(start, start + ONE_DAY)


def ensure_judged(conn: psycopg.Connection, session_id: str, partition_key: str, messages: Sequence[Message],
                  judge: ModelBackend, ctx: CallContext) -> StageReport:
    """Judge one session-day's segments unless the stored judgement already follows from
    the same inputs. Runs inside the caller's transaction."""
    report = StageReport()
    segments = cut_segments(messages)
    if not segments:
        return report
    if repository.segment_judgement_current(conn, session_id, partition_key, judgement_fingerprint(segments, judge)):
        report.counts["segments_reused"] += len(segments)
        return report
    judgement = judge_session(segments, judge)
    repository.replace_segments(conn, judgement, partition_key, ctx.run_id,
                                (judge.name, judge.model, judge.prompt_version(JUDGE_SEGMENTS)))
    repository.insert_llm_calls(conn, [judgement.call], run_id=ctx.run_id, asset=ctx.asset,
                                partition_key=partition_key, session_id=session_id)
    report.calls.append(judgement.call)
    for judged in judgement.judged:
        report.counts["segments_judged"] += 1
        report.counts["segments_dropped"] += judged.dropped
        if judged.status == "failed":
            report.counts["segments_judge_failed"] += 1
        if judged.dropped:
            report.counts[f"dropped:{judged.verdict.reason}"] += 1
        report.preview.append({
            "segment": judged.segment.segment_id, "messages": len(judged.segment.messages),
            "dropped": judged.dropped, "reason": judged.verdict.reason, "confidence": judged.verdict.confidence,
            "first": judged.segment.messages[0].content,
        })
    if judgement.call.status != "ok":
        report.failures.append(f"{session_id} {partition_key}: judging failed, all kept: {judgement.call.error}")
    return report


def _parallel(items: Sequence, work: Callable, concurrency: int) -> StageReport:
    report = StageReport()
    if concurrency <= 1 or len(items) <= 1:
        for item in items:
            report.merge(work(item))
        return report
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for result in pool.map(work, items):
            report.merge(result)
    return report


def judge_days(pool: ConnectionPool, partition_keys: Sequence[str], judge: ModelBackend, ctx: CallContext,
               concurrency: int = 1) -> StageReport:
    """conversation_segments for each day: every non-temp session's segments, judged."""
    report = StageReport()
    for key in partition_keys:
        with pool.connection() as conn:
            by_session: dict[str, list[Message]] = defaultdict(list)
            for message in repository.messages_in_window(conn, _day_window(key)):
                by_session[message.session_id].append(message)

        def work(item, key=key) -> StageReport:
            session_id, messages = item
            with pool.connection() as conn, conn.transaction():
                repository.lock_session(conn, session_id)
                return ensure_judged(conn, session_id, key, messages, judge, ctx)

        report.merge(_parallel(sorted(by_session.items()), work, concurrency))
        report.counts["sessions"] += len(by_session)
    return report


def _fold_days(messages: Sequence[Message], stored_keys: set[str], first: str, last: str) -> list[str]:
    """Days the fold covers: days of messages newer than the cursor up to the range's end,
    plus later days already built (rebuilt forward when their inputs changed)."""
    last = max([last, *stored_keys])
    days = {m.ts.date().isoformat() for m in messages if m.ts.date().isoformat() <= last}
    return sorted(days | {k for k in stored_keys if k >= first})


def summarize_range(pool: ConnectionPool, partition_keys: Sequence[str], summarizer: ModelBackend,
                    decider: ModelBackend, ctx: CallContext, *, language: str = "auto",
                    chunk_chars: int = SUMMARY_CHUNK_CHARS, concurrency: int = 1,
                    partition_start: str = "0000-00-00") -> StageReport:
    """session_summaries for a range of days, in order, for every non-temp session that
    has messages in it."""
    first, last = partition_keys[0], partition_keys[-1]
    with pool.connection() as conn:
        sessions = repository.sessions_in_window(
            conn, TimeWindow(_day_window(first).start, _day_window(last).end))

    def work(item) -> StageReport:
        session_id, user_id = item
        report = StageReport()
        with pool.connection() as conn, repository.session_lock(conn, session_id):
            with conn.transaction():
                start = repository.summary_start_state(conn, session_id, first)
                stored = repository.summary_versions_from(conn, session_id, first)
                messages = repository.session_messages_after(conn, session_id, start.cursor_seq)
            keys = [k for k in _fold_days(messages, {v.partition_key for v in stored}, first, last)
                    if k >= partition_start]
            days = []
            for key in keys:
                with conn.transaction():
                    day_messages = repository.session_messages_in_window(conn, session_id, _day_window(key))
                    report.merge(ensure_judged(conn, session_id, key, day_messages, decider, ctx))
                    days.append(Day(key, _day_window(key).end, repository.dropped_seqs(conn, session_id, key)))
            plan = FoldPlan(session_id, user_id, start, days, messages, stored)
            for event in fold_session(plan, summarizer, decider, language, chunk_chars):
                with conn.transaction():
                    if isinstance(event, VersionBuilt):
                        v = event.version
                        repository.insert_summary_version(conn, v, ctx.run_id)
                        repository.insert_llm_calls(conn, event.calls, run_id=ctx.run_id, asset=ctx.asset,
                                                    partition_key=v.partition_key, session_id=session_id)
                        report.calls.extend(event.calls)
                        report.counts[f"versions_{v.kind}"] += 1
                        report.preview.append({"session": session_id, "version": v.version, "day": v.partition_key,
                                               "step": f"{v.step}/{v.step_count}", "cursor_seq": v.cursor_seq,
                                               "current": v.summary.current_discussion})
                    elif isinstance(event, VersionsReused):
                        report.counts["versions_reused"] += event.count
                    elif isinstance(event, DiscardFrom):
                        repository.discard_summary_versions(conn, session_id, event.partition_key, event.step)
                        report.counts["rebuilt_from_changed_day"] += 1
                    elif isinstance(event, FoldStopped):
                        repository.insert_llm_calls(conn, event.calls, run_id=ctx.run_id, asset=ctx.asset,
                                                    partition_key=event.partition_key, session_id=session_id)
                        report.calls.extend(event.calls)
                        report.failures.append(
                            f"{session_id} {event.partition_key} chunk {event.step}: {event.reason}")
                        report.counts["sessions_incomplete"] += 1
        report.counts["sessions"] += 1
        return report

    return _parallel(sessions, work, concurrency)

"""Stage `session_summaries`: each session's rolling summary with its cursor, built day by
day in order; a changed day rebuilds forward from it, reusing every version whose inputs
did not change."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.db import facts_chunks as facts_chunks_db
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.db import transcripts as transcripts_db
from memory_pipelines.llm.backends import ModelCall
from memory_pipelines.records import Message, TimeWindow
from memory_pipelines.stages.common import (
    BATCH_SESSIONS, COMMIT_SECONDS, Backends, CallContext, Counts, StageFailure, StageReport, Window,
    commit_in_slices, day_window, run_parallel,
)
from memory_pipelines.stages.judging import ensure_judged
from memory_pipelines.core.summary_fold import (
    SUMMARY_CHUNK_CHARS, Day, DiscardFrom, FoldPlan, FoldStopped, SummaryVersion, VersionBuilt, VersionsReused,
    fold_session,
)

ASSET = "session_summaries"


@dataclass(frozen=True)
class Settings:
    language: str = "auto"  # the summary's language; auto follows the conversation
    chunk_chars: int = SUMMARY_CHUNK_CHARS  # transcript characters one summary call reads
    concurrency: int = 1  # sessions folded at once
    partition_start: str = "0000-00-00"  # no day before it is folded (MEMORY_PARTITION_START)


@dataclass
class SummaryCounts(Counts):
    sessions: int = 0
    versions_built: int = 0
    versions_reused: int = 0
    rebuilt_from_changed_day: int = 0
    sessions_incomplete: int = 0
    versions_by_kind: Counter = field(default_factory=Counter)  # chunk, trim, cursor_only


def fold_days(messages: Sequence[Message], stored_keys: set[str], first: str, last: str) -> list[str]:
    """Days the fold covers: days of messages newer than the cursor up to the range's end,
    plus later days already built (rebuilt forward when their inputs changed)."""
    last = max([last, *stored_keys])
    days = {m.ts.date().isoformat() for m in messages if m.ts.date().isoformat() <= last}
    return sorted(days | {k for k in stored_keys if k >= first})


def run(pool: ConnectionPool, window: Window, settings: Settings, backends: Backends) -> StageReport[SummaryCounts]:
    """Summaries over the window's days, in order, for every non-temp session with messages
    in it. `writer` summarizes; `judge` judges the days' segments the fold needs and
    decides which summary entries a chunk overturned. Sessions are folded a batch at a time
    (their state read in one query per kind), `concurrency` batches at once."""
    ctx = CallContext(window.run_id, ASSET)
    with pool.connection() as conn:
        sessions = summaries_db.sessions_in_window(conn, window.span, window.shard)
        forks = transcripts_db.fork_points(conn, [s for s, _ in sessions])
    report = StageReport(SummaryCounts(), calls_models=True)
    # a fork starts from its parent's state at the fork point: parents fold first
    for group in ([s for s in sessions if s[0] not in forks], [s for s in sessions if s[0] in forks]):
        # as many batches as sessions fold at once: a batch's sessions fold one after another
        size = min(BATCH_SESSIONS, max(1, -(-len(group) // max(settings.concurrency, 1))))
        batches = [group[i:i + size] for i in range(0, len(group), size)]
        report = run_parallel(batches, lambda batch: _fold_batch(pool, batch, window, settings, backends, ctx),
                              report, settings.concurrency)
    return report


def _fold_batch(pool: ConnectionPool, batch: Sequence[tuple[str, str]], window: Window, settings: Settings,
                backends: Backends, ctx: CallContext) -> StageReport[SummaryCounts]:
    """Fold a batch of sessions under their locks: read their start states, stored versions
    and messages in one query each, judge the days the folds need in one transaction, then
    fold each session, committing what the folds yield at least every `COMMIT_SECONDS` (a
    stopped run keeps what it built, all but the last moment of it, and the next resumes from it)."""
    summarizer, decider = backends.writer, backends.judge
    report = StageReport(SummaryCounts(), calls_models=True)
    ids = [session_id for session_id, _ in batch]
    with pool.connection() as conn, summaries_db.sessions_lock(conn, ids):
        with conn.transaction():
            starts = summaries_db.summary_start_states(conn, ids, window.first)
            stored = summaries_db.summary_versions_from(conn, ids, window.first)
            cursors = {s: starts[s].cursor_seq for s in ids}
            messages = summaries_db.sessions_messages_after(conn, cursors)
            # a fork's fold also reads the parent turns it shares that its state does not cover
            inherited = summaries_db.fork_inherited_messages(conn, cursors)
        keys = {s: [k for k in fold_days(messages.get(s, []), {v.partition_key for v in stored.get(s, [])},
                                         window.first, window.last) if k >= settings.partition_start] for s in ids}
        # the days' segments judged first (the fold leaves out what judging dropped), in one transaction
        with conn.transaction():
            spans = {s: TimeWindow(day_window(k[0]).start, day_window(k[-1]).end) for s, k in keys.items() if k}
            # the spans' messages after the cursor were read above; only those up to it are read here
            # (none in a first run), and come first by seq
            up_to_cursor = summaries_db.sessions_messages_in_windows_through(conn, spans, cursors)
            by_day: dict[tuple[str, str], list[Message]] = defaultdict(list)
            for session_id, span in spans.items():
                for m in up_to_cursor.get(session_id, []) + messages.get(session_id, []):
                    if span.start <= m.ts < span.end:
                        by_day[session_id, m.ts.astimezone(UTC).date().isoformat()].append(m)
            # the judging's counts belong to conversation_segments; its calls and failures to this run
            judged = ensure_judged(conn, [(s, k, by_day.get((s, k), [])) for s, session_keys in keys.items()
                                          for k in session_keys], decider, ctx)
            report.calls.extend(judged.calls)
            report.failures.extend(judged.failures)
            dropped = facts_chunks_db.sessions_dropped_seqs_by_day(conn, list(spans),
                                                                   sorted(set().union(*keys.values())))

        def folds() -> Iterator[tuple[str, object]]:
            for session_id, user_id in batch:
                days = [Day(key, day_window(key).end, dropped.get((session_id, key), frozenset()))
                        for key in keys[session_id]]
                plan = FoldPlan(session_id, user_id, starts[session_id], days,
                                inherited.get(session_id, []) + messages.get(session_id, []),
                                stored.get(session_id, []))
                for event in fold_session(plan, summarizer, decider, settings.language, settings.chunk_chars):
                    yield session_id, event
                report.counts.sessions += 1

        # a token budget counts the calls committed: with one set, each is committed as it comes
        budgeted = any(b.config.token_budget for b in (summarizer, decider))
        built = _SliceWrites()
        commit_in_slices(conn, folds(), lambda made: _store_event(conn, *made, built, report),
                         lambda: built.write(conn, ctx), 0.0 if budgeted else COMMIT_SECONDS)
    return report


@dataclass
class _SliceWrites:
    """The versions and calls a slice's folds built, written as the slice ends: a statement
    for all of them, not one per version (discarded versions go at once, before any version
    of a later step of their session is built)."""
    versions: list[SummaryVersion] = field(default_factory=list)
    calls: list[tuple[ModelCall, str, str]] = field(default_factory=list)

    def add(self, calls: Sequence[ModelCall], partition_key: str, session_id: str,
            version: SummaryVersion | None = None) -> None:
        self.calls += [(call, partition_key, session_id) for call in calls]
        if version is not None:
            self.versions.append(version)

    def write(self, conn: psycopg.Connection, ctx: CallContext) -> None:
        summaries_db.insert_summary_versions(conn, self.versions, ctx.run_id)
        ctx.record_all(conn, self.calls)
        self.versions.clear()
        self.calls.clear()


def _store_event(conn: psycopg.Connection, session_id: str, event: object, built: _SliceWrites,
                 report: StageReport[SummaryCounts]) -> None:
    """Take what a session's fold yielded: versions and calls to write as the slice ends,
    discards at once (inside the caller's transaction)."""
    counts = report.counts
    if isinstance(event, VersionBuilt):
        v = event.version
        built.add(event.calls, v.partition_key, session_id, v)
        report.calls.extend(event.calls)
        counts.versions_built += 1
        counts.versions_by_kind[v.kind] += 1
        report.preview.append({"session": session_id, "version": v.version, "day": v.partition_key,
                               "step": f"{v.step}/{v.step_count}", "cursor_seq": v.cursor_seq,
                               "current": v.summary.current_discussion})
    elif isinstance(event, VersionsReused):
        counts.versions_reused += event.count
    elif isinstance(event, DiscardFrom):
        summaries_db.discard_summary_versions(conn, session_id, event.partition_key, event.step)
        counts.rebuilt_from_changed_day += 1
    elif isinstance(event, FoldStopped):
        built.add(event.calls, event.partition_key, session_id)
        report.calls.extend(event.calls)
        report.failures.append(StageFailure(
            session_id, event.partition_key, f"chunk {event.step}: {event.reason}",
            any(c.budget_reached for c in event.calls)))
        counts.sessions_incomplete += 1

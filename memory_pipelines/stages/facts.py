"""Stage `memory_facts`: facts extracted from sessions gone stale, validated one by one,
upserted per user; then each touched user's memory_summary rewritten when their facts
changed, and the session marked extracted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from psycopg_pool import ConnectionPool

from memory_pipelines.config import SPECS
from memory_pipelines.db import repository
from memory_pipelines.facts import facts_fingerprint, render_for_extraction, validate_items
from memory_pipelines.llm.backends import ModelBackend, ModelCall, ModelError
from memory_pipelines.llm.prompts import EXTRACT_FACTS, SUMMARIZE_FACTS
from memory_pipelines.records import Message
from memory_pipelines.stages.common import (
    Backends, CallContext, Counts, StageFailure, StageReport, Window, map_parallel, session_batches,
)

ASSET = "memory_facts"


@dataclass(frozen=True)
class Settings:
    # a session with no activity this long before a day's end is extracted
    stale_after: timedelta = timedelta(minutes=SPECS["MEMORY_STALE_MINUTES"].default)
    concurrency: int = 1


@dataclass
class FactCounts(Counts):
    sessions_extracted: int = 0
    sessions_failed: int = 0
    facts_accepted: int = 0
    facts_rejected: int = 0
    users_touched: int = 0
    memory_summaries_written: int = 0


def _report() -> StageReport[FactCounts]:
    return StageReport(FactCounts(), calls_models=True)


def refresh_memory_summaries(pool: ConnectionPool, user_ids: Sequence[str], writer: ModelBackend,
                             ctx: CallContext, partition_key: str, concurrency: int) -> StageReport[FactCounts]:
    """Rewrite each user's memory_summary from all their current facts, unless those did not
    change; a batch of users per transaction, their facts and summaries' sources read in one
    query each."""
    report = _report()
    for batch in session_batches(sorted(user_ids), writer, concurrency):
        with pool.connection() as conn, conn.transaction():
            repository.lock_users(conn, batch)
            facts = repository.visible_facts_of_users(conn, batch)
            written_from = repository.memory_summary_hashes(conn, batch)
            digests = {u: facts_fingerprint(user_facts) for u, user_facts in facts.items()}
            due = [(u, facts[u], digests[u]) for u in batch if u in facts and written_from.get(u) != digests[u]]

            def summarize(item: tuple[str, list[tuple[str, str, str]], str]):
                """(content, call, error): the content is None when the call failed."""
                try:
                    return *writer.summarize_facts(item[1]), None
                except ModelError as exc:
                    return None, exc.call, exc

            answers = map_parallel(due, summarize, concurrency)
            with conn.pipeline():  # the writes wait on no answer: one round trip for the batch
                ctx.record_all(conn, [(call, partition_key, None) for _, call, _ in answers])
                for (user_id, user_facts, digest), (content, call, error) in zip(due, answers):
                    report.calls.append(call)
                    if error is not None:
                        report.failures.append(StageFailure(None, None, str(error), call.budget_reached, user_id))
                        continue
                    repository.upsert_memory_summary(conn, user_id, content, len(user_facts), digest, writer.model,
                                                     writer.prompt_version(SUMMARIZE_FACTS), ctx.run_id)
                    report.counts.memory_summaries_written += 1
    return report


@dataclass(frozen=True)
class _Answer:
    session: repository.DueSession
    messages: list[Message]
    items: object  # what the model returned, validated item by item; None when the call failed
    call: ModelCall
    error: ModelError | None


def _extract_batch(pool: ConnectionPool, batch: Sequence[repository.DueSession], key: str, end: datetime,
                   extractor: ModelBackend, ctx: CallContext, concurrency: int) -> StageReport[FactCounts]:
    """One transaction for a batch of due sessions: lock them, read their messages, dropped
    seqs and judging state in one query each, ask the model about each (`concurrency` at
    once), write what it found."""
    report = _report()
    counts = report.counts
    ids = [s.session_id for s in batch]
    with pool.connection() as conn, conn.transaction():
        repository.lock_sessions(conn, ids)
        judging_failed = repository.sessions_judging_failed(conn, ids, key)
        messages = repository.sessions_messages(conn, ids, end)
        dropped = repository.sessions_dropped_seqs(conn, ids)
        for session_id in sorted(judging_failed):
            # its noise is not known yet: facts taken from noise now would stay for good
            report.failures.append(StageFailure(session_id, None, "noise judging failed, extraction left due"))
            counts.sessions_failed += 1

        def ask(session: repository.DueSession) -> _Answer:
            seen = messages.get(session.session_id, [])
            drop = dropped.get(session.session_id, frozenset())
            kept = [m for m in seen if m.seq not in drop and m.role != "system"]
            try:
                items, call = extractor.extract_facts(kept, render_for_extraction(seen, drop))
                return _Answer(session, seen, items, call, None)
            except ModelError as exc:
                return _Answer(session, seen, None, exc.call, exc)

        answers = map_parallel([s for s in batch if s.session_id not in judging_failed], ask, concurrency)
        writers = [a.session.user_id for a in answers if a.error is None]
        repository.lock_users(conn, writers)
        archived_keys = repository.archived_fact_keys(conn, writers)
        lineage = {"partition_key": key, "run_id": ctx.run_id, "model": extractor.model,
                   "prompt_version": extractor.prompt_version(EXTRACT_FACTS)}
        extracted, observed = [], []
        # nothing below waits on an answer (but a re-observed archived key): sent in one round trip
        with conn.pipeline():
            ctx.record_all(conn, [(answer.call, key, answer.session.session_id) for answer in answers])
            for answer in answers:
                session = answer.session
                report.calls.append(answer.call)
                if answer.error is not None:
                    report.failures.append(StageFailure(session.session_id, None,
                                                        f"extraction failed, left due: {answer.error}",
                                                        answer.call.budget_reached))
                    counts.sessions_failed += 1
                    continue
                accepted, rejected = validate_items(answer.items, answer.messages) if answer.messages else ([], [])
                observed.extend((session.user_id, c, {"session_id": session.session_id, **lineage}) for c in accepted)
                repository.insert_fact_rejections(conn, session.user_id, session.session_id, rejected, lineage)
                extracted.append((session, len(accepted), len(rejected)))
                counts.sessions_extracted += 1
                counts.facts_accepted += len(accepted)
                counts.facts_rejected += len(rejected)
                report.preview.extend({"session": session.session_id, "category": c.category, "key": c.key,
                                       "value": c.value, "source": c.source, "confidence": c.confidence}
                                      for c in accepted)
                report.users.add(session.user_id)
                report.sessions.add(session.session_id)
            repository.upsert_facts(conn, observed, archived_keys)
            repository.mark_sessions_extracted(conn, extracted, end, key, ctx.run_id)
    return report


def run(pool: ConnectionPool, window: Window, settings: Settings, backends: Backends) -> StageReport[FactCounts]:
    """For each day: every session stale as of the day's end and not yet extracted through
    its last activity (a gap before the window is caught up). Then, once for the run, the
    memory_summary of every user whose facts it touched or whose summary is behind their
    facts (an earlier rewrite failed): a user's summary is written at most once a run, from
    their facts as the run leaves them (what a run per day ends with too)."""
    extractor = backends.writer
    ctx = CallContext(window.run_id, ASSET)
    report = _report()
    # a session becomes due on the day its last message goes stale; one left due before the
    # window is caught up on its first day, one that failed on the next day
    active = window.active_days(pool, settings.stale_after) | {window.first}
    retry = False
    for key, day in window.days(ASSET):
        if key not in active and not retry:
            continue
        with pool.connection() as conn:
            due = repository.sessions_due_for_extraction(conn, day.end, day.end - settings.stale_after)
        extracted = _report()
        for batch in session_batches(due, extractor, settings.concurrency):
            extracted.merge(_extract_batch(pool, batch, key, day.end, extractor, ctx, settings.concurrency))
        report.merge(extracted)
        retry = bool(extracted.failures)
    with pool.connection() as conn:
        outdated = repository.users_with_outdated_memory_summary(conn)
    report.merge(refresh_memory_summaries(pool, sorted(report.users | set(outdated)), extractor, ctx, window.last,
                                          settings.concurrency))
    report.counts.users_touched = len(report.users)
    report.check_scope = {"user_ids": sorted(report.users)}
    return report

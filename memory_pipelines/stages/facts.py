"""Stage `memory_facts`: facts extracted from sessions gone stale, validated one by one,
upserted per user; then each touched user's memory_summary rewritten when their facts
changed, and the session marked extracted."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.config import SPECS
from memory_pipelines.db import repository
from memory_pipelines.facts import facts_fingerprint, render_for_extraction, validate_items
from memory_pipelines.llm.backends import ModelBackend, ModelError
from memory_pipelines.llm.prompts import EXTRACT_FACTS, SUMMARIZE_FACTS
from memory_pipelines.stages.common import Backends, CallContext, Counts, StageFailure, StageReport, Window, run_parallel

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


def refresh_memory_summary(conn: psycopg.Connection, user_id: str, writer: ModelBackend, ctx: CallContext,
                           partition_key: str) -> StageReport[FactCounts]:
    """Rewrite the user's memory_summary from all current facts, unless they did not change."""
    report = _report()
    facts = [(f.category, f.key, f.value) for f in repository.facts_for_user(conn, user_id)]
    digest = facts_fingerprint(facts)
    if not facts or repository.memory_summary_hash(conn, user_id) == digest:
        return report
    try:
        content, call = writer.summarize_facts(facts)
    except ModelError as exc:
        call, content = exc.call, None
        report.failures.append(StageFailure(None, None, str(exc), exc.call.budget_reached, user_id))
    ctx.record(conn, [call], partition_key, None)
    report.calls.append(call)
    if content is not None:
        repository.upsert_memory_summary(conn, user_id, content, len(facts), digest, writer.model,
                                         writer.prompt_version(SUMMARIZE_FACTS), ctx.run_id)
        report.counts.memory_summaries_written += 1
    return report


def run(pool: ConnectionPool, window: Window, settings: Settings, backends: Backends) -> StageReport[FactCounts]:
    """For each day: every session stale as of the day's end and not yet extracted through
    its last activity (a gap before the window is caught up), then the memory_summary of
    every user whose facts it touched or whose summary is behind their facts (an earlier
    rewrite failed)."""
    extractor = backends.writer
    ctx = CallContext(window.run_id, ASSET)
    report = _report()
    for key, day in window.days(ASSET):
        end = day.end
        with pool.connection() as conn:
            due = repository.sessions_due_for_extraction(conn, end, end - settings.stale_after)

        def extract(session: repository.DueSession, key=key, end=end) -> StageReport[FactCounts]:
            part = _report()
            counts = part.counts
            with pool.connection() as conn, conn.transaction():
                repository.lock_sessions(conn, [session.session_id])
                if repository.session_judging_failed(conn, session.session_id, key):
                    # its noise is not known yet: facts taken from noise now would stay for good
                    part.failures.append(StageFailure(session.session_id, None,
                                                      "noise judging failed, extraction left due"))
                    counts.sessions_failed += 1
                    return part
                messages = repository.session_messages_before(conn, session.session_id, end)
                dropped = repository.session_dropped_seqs(conn, session.session_id)
                kept = [m for m in messages if m.seq not in dropped and m.role != "system"]
                lineage = {"partition_key": key, "run_id": ctx.run_id, "model": extractor.model,
                           "prompt_version": extractor.prompt_version(EXTRACT_FACTS)}
                try:
                    items, call = extractor.extract_facts(kept, render_for_extraction(messages, dropped))
                except ModelError as exc:
                    ctx.record(conn, [exc.call], key, session.session_id)
                    part.calls.append(exc.call)
                    part.failures.append(StageFailure(session.session_id, None, f"extraction failed, left due: {exc}",
                                                      exc.call.budget_reached))
                    counts.sessions_failed += 1
                    return part
                ctx.record(conn, [call], key, session.session_id)
                part.calls.append(call)
                accepted, rejected = validate_items(items, messages) if messages else ([], [])
                repository.lock_user(conn, session.user_id)
                repository.upsert_facts(conn, session.user_id, accepted, {"session_id": session.session_id, **lineage})
                repository.insert_fact_rejections(conn, session.user_id, session.session_id, rejected, lineage)
                repository.mark_session_extracted(conn, session, end, len(accepted), len(rejected), key, ctx.run_id)
            counts.sessions_extracted += 1
            counts.facts_accepted += len(accepted)
            counts.facts_rejected += len(rejected)
            part.preview.extend({"session": session.session_id, "category": c.category, "key": c.key,
                                 "value": c.value, "source": c.source, "confidence": c.confidence} for c in accepted)
            part.users.add(session.user_id)
            part.sessions.add(session.session_id)
            return part

        extracted = run_parallel(due, extract, _report(), settings.concurrency)
        report.merge(extracted)
        with pool.connection() as conn:
            outdated = repository.users_with_outdated_memory_summary(conn)
        for user_id in sorted(extracted.users | set(outdated)):
            with pool.connection() as conn, conn.transaction():
                repository.lock_user(conn, user_id)
                report.merge(refresh_memory_summary(conn, user_id, extractor, ctx, key))
    report.counts.users_touched = len(report.users)
    report.check_scope = {"user_ids": sorted(report.users)}
    return report

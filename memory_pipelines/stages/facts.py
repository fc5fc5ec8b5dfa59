"""Stage `memory_facts`: the facts of sessions gone stale, as their summaries' distillation
calls wrote them (no model call of its own), validated one by one, upserted per user, the
session marked extracted; then each touched user's memory_summary rewritten, once a run,
when their facts changed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.config import SPECS
from memory_pipelines.db import facts_chunks as facts_chunks_db
from memory_pipelines.db import lifecycle as lifecycle_db
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.core.fact_extraction import facts_fingerprint, validate_items
from memory_pipelines.llm.backends import ModelBackend, ModelError
from memory_pipelines.llm.prompts import SUMMARIZE_FACTS
from memory_pipelines.stages.common import (
    Backends, CallContext, Counts, Slices, StageFailure, StageReport, Window, chunk_spans, map_parallel,
    session_batches,
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
            facts_chunks_db.lock_users(conn, batch)
            facts = facts_chunks_db.visible_facts_of_users(conn, batch)
            written_from = facts_chunks_db.memory_summary_hashes(conn, batch)
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
                    facts_chunks_db.upsert_memory_summary(conn, user_id, content, len(user_facts), digest, writer.model,
                                                          writer.prompt_version(SUMMARIZE_FACTS), ctx.run_id)
                    report.counts.memory_summaries_written += 1
    return report


def _extract_batch(conn: psycopg.Connection, batch: Sequence[facts_chunks_db.DueSession], key: str, end: datetime,
                   ctx: CallContext) -> StageReport[FactCounts]:
    """A batch of due sessions, in the caller's transaction, which holds their session and
    user locks: read the facts their summaries' distillation calls wrote (through the day)
    with the messages those read, validate them item by item, write what holds. A session
    whose noise judging failed, or whose summary does not yet reach its last reply, is left due."""
    report = _report()
    counts = report.counts
    ids = [s.session_id for s in batch]
    judging_failed = facts_chunks_db.sessions_judging_failed(conn, ids, key)
    for session_id in sorted(judging_failed):
        # its noise is not known yet: facts taken from noise now would stay for good
        report.failures.append(StageFailure(session_id, None, "noise judging failed, extraction left due"))
    short = facts_chunks_db.sessions_summarized_short(conn, [i for i in ids if i not in judging_failed], key, end)
    for session_id, (cursor_seq, last_reply) in sorted(short.items()):
        report.failures.append(StageFailure(session_id, None, (
            f"its summary reaches seq {cursor_seq if cursor_seq is not None else 'none'}, not its last reply "
            f"(seq {last_reply}): extraction left due until session_summaries has run for {key}")))
    undistilled = facts_chunks_db.sessions_with_undistilled_chunks(conn, ids, key)
    for session_id, day in sorted(undistilled.items()):
        # summarized by an earlier version, whose chunks kept no facts: their turns would be lost
        report.failures.append(StageFailure(session_id, None, (
            f"chunks summarized before distillation calls (migration 0023) hold unextracted turns: "
            f"extraction left due; run the pipeline from {day} (memory-pipelines run --start {day})")))
    waiting = set(judging_failed) | set(short) | set(undistilled)
    counts.sessions_failed += len(waiting)
    ready = [s for s in batch if s.session_id not in waiting]
    chunks = summaries_db.distilled_chunks(conn, [s.session_id for s in ready], through=key)
    messages = summaries_db.chunks_kept_messages(conn, [c for found in chunks.values() for c in found])
    archived_keys = lifecycle_db.archived_fact_keys(conn, [s.user_id for s in ready])
    extracted, observed = [], []
    # the rejections wait on no answer: sent in one round trip
    with conn.pipeline():
        for session in ready:
            accepted_count = rejected_count = 0
            spans = chunk_spans(chunks.get(session.session_id, []), messages.get(session.session_id, []))
            for chunk, kept in spans:
                if not kept:
                    continue
                lineage = {"session_id": session.session_id, "partition_key": key, "run_id": ctx.run_id,
                           "model": chunk.model, "prompt_version": chunk.prompt_version, "call_id": chunk.call_id}
                accepted, rejected = validate_items(chunk.memory_items.get("facts", []), kept)
                observed.extend((session.user_id, c, lineage) for c in accepted)
                facts_chunks_db.insert_fact_rejections(conn, session.user_id, session.session_id, rejected, lineage)
                accepted_count += len(accepted)
                rejected_count += len(rejected)
                report.preview.extend({"session": session.session_id, "category": c.category, "key": c.key,
                                       "value": c.value, "source": c.source, "confidence": c.confidence}
                                      for c in accepted)
            extracted.append((session, accepted_count, rejected_count))
            counts.sessions_extracted += 1
            counts.facts_accepted += accepted_count
            counts.facts_rejected += rejected_count
            report.users.add(session.user_id)
            report.sessions.add(session.session_id)
    # out of the pipeline: facts are loaded by COPY
    facts_chunks_db.upsert_facts(conn, observed, archived_keys)
    facts_chunks_db.mark_sessions_extracted(conn, extracted, end, key, ctx.run_id)
    return report


def run(pool: ConnectionPool, window: Window, settings: Settings, backends: Backends) -> StageReport[FactCounts]:
    """For each day: every session stale as of the day's end and not yet extracted through
    its last activity (a gap before the window is caught up). Then, once for the run, the
    memory_summary of every user whose facts it touched or whose summary is behind their
    facts (an earlier rewrite failed): a user's summary is written at most once a run, from
    their facts as the run leaves them (what a run per day ends with too)."""
    ctx = CallContext(window.run_id, ASSET)
    report = _report()
    # a session becomes due on the day its last message goes stale; one left due before the
    # window is caught up on its first day, one that failed on the next day
    active = window.active_days(pool, settings.stale_after)

    def batches() -> Iterator[tuple[str, datetime, Sequence[facts_chunks_db.DueSession]]]:
        fresh_since = None  # every session due is looked for, not only those gone stale since
        for key, day in window.days(ASSET):
            if key not in active and fresh_since is not None:
                continue
            stale_before = day.end - settings.stale_after
            due = facts_chunks_db.sessions_due_for_extraction(conn, day.end, stale_before, window.shard, fresh_since)
            failed_before = len(report.failures)
            for batch in session_batches(due):
                yield key, day.end, batch
            # what failed stays due: the next day looks for every session due again
            fresh_since = stale_before if len(report.failures) == failed_before else None

    # batches share a transaction for up to COMMIT_SECONDS (a commit per day was most of a long
    # backfill's extraction); a batch whose locks another transaction holds begins a new one
    with pool.connection() as conn, Slices(conn) as slices:
        for key, end, batch in batches():
            with slices.item([s.session_id for s in batch], [s.user_id for s in batch]):
                report.merge(_extract_batch(conn, batch, key, end, ctx))
    with pool.connection() as conn:
        outdated = facts_chunks_db.users_with_outdated_memory_summary(conn, window.shard)
    report.merge(refresh_memory_summaries(pool, sorted(report.users | set(outdated)), backends.writer, ctx,
                                          window.last, settings.concurrency))
    report.counts.users_touched = len(report.users)
    report.check_scope = {"user_ids": sorted(report.users)}
    return report

"""Running the model stages against the database: read through the repository, call the
pure stage, write what it produced. No Dagster here; the assets call these."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.chunks import CONTEXT_WINDOW_MESSAGES, PACKER_VERSION, chunk_breadcrumbs, pack_chunks
from memory_pipelines.config import SPECS
from memory_pipelines.db import repository
from memory_pipelines.db.queries import query
from memory_pipelines.facts import render_for_extraction, validate_items
from memory_pipelines.knowledge import ERROR_TTL, prepare, resolved_errors
from memory_pipelines.llm.backends import ModelBackend, ModelCall, ModelError, estimate_tokens, render_transcript
from memory_pipelines.llm.prompts import EXTRACT_FACTS, JUDGE_SEGMENTS, SUMMARIZE_FACTS, SYNTHESIZE_KNOWLEDGE
from memory_pipelines.records import Message, Segment, TimeWindow
from memory_pipelines.segments import (
    MISSING_VERDICT, SessionJudgement, cut_segments, judge_session, judge_sessions, judgement_fingerprint,
)
from memory_pipelines.summaries import (
    SUMMARY_CHUNK_CHARS, Day, DiscardFrom, FoldPlan, FoldStopped, VersionBuilt, VersionsReused, fold_session,
)

log = logging.getLogger(__name__)
ONE_DAY = timedelta(days=1)


@dataclass(frozen=True)
class StageFailure:
    """A session (or a user's memory summary) a stage left as it was, and why; the next run
    or the step's retry does it again."""

    session_id: str | None
    partition_key: str | None
    reason: str
    budget_reached: bool = False  # stopped by the run's token budget: a retry cannot help
    user_id: str | None = None  # for work of a user's rather than a session's

    def __str__(self) -> str:
        subject = self.session_id or f"memory_summary of {self.user_id}"
        return f"{subject} {self.partition_key}: {self.reason}" if self.partition_key else f"{subject}: {self.reason}"


@dataclass
class StageReport:
    """What a stage did, for materialization metadata."""

    counts: Counter = field(default_factory=Counter)
    calls: list[ModelCall] = field(default_factory=list)
    failures: list[StageFailure] = field(default_factory=list)
    dropped_by_reason: Counter = field(default_factory=Counter)  # segments the noise filter dropped
    versions_by_kind: Counter = field(default_factory=Counter)  # summary versions built: chunk, trim, ...
    preview: list[dict] = field(default_factory=list)
    users: set[str] = field(default_factory=set)  # users whose rows the stage wrote
    sessions: set[str] = field(default_factory=set)  # sessions whose rows the stage wrote

    def merge(self, other: "StageReport") -> None:
        self.counts.update(other.counts)
        self.dropped_by_reason.update(other.dropped_by_reason)
        self.versions_by_kind.update(other.versions_by_kind)
        self.users |= other.users
        self.sessions |= other.sessions
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


def _store_judgement(conn: psycopg.Connection, partition_key: str, judgement: SessionJudgement,
                     judge: ModelBackend, ctx: CallContext) -> StageReport:
    """Replace a session-day's segments with a judgement. Runs inside the caller's transaction."""
    report = StageReport()
    session_id = judgement.judged[0].segment.session_id
    repository.replace_segments(conn, judgement, partition_key, ctx.run_id,
                                (judge.name, judge.model, judge.prompt_version(JUDGE_SEGMENTS)))
    for judged in judgement.judged:
        report.counts["segments_judged"] += 1
        report.counts["segments_dropped"] += judged.dropped
        if judged.status == "failed":
            report.counts["segments_judge_failed"] += 1
        if judged.dropped:
            report.dropped_by_reason[judged.verdict.reason] += 1
        report.preview.append({
            "segment": judged.segment.segment_id, "messages": len(judged.segment.messages),
            "dropped": judged.dropped, "reason": judged.verdict.reason, "confidence": judged.verdict.confidence,
            "first": judged.segment.messages[0].content,
        })
    failed = sum(j.status == "failed" for j in judgement.judged)
    if judgement.call.status != "ok":
        report.failures.append(StageFailure(session_id, partition_key,
                                            f"judging failed, all kept: {judgement.call.describe()}",
                                            judgement.call.budget_reached))
    elif failed:
        report.failures.append(StageFailure(session_id, partition_key,
                                            f"{failed} segments kept unjudged: {MISSING_VERDICT}"))
    return report


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
    report.merge(_store_judgement(conn, partition_key, judgement, judge, ctx))
    repository.insert_llm_calls(conn, [judgement.call], run_id=ctx.run_id, asset=ctx.asset,
                                partition_key=partition_key, session_id=session_id)
    report.calls.append(judgement.call)
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


# An answer's length grows with the segments asked about: cap them as well as the prompt.
MAX_SEGMENTS_PER_CALL = 100


def pack_sessions(sessions: Sequence[Sequence[Segment]], batch_tokens: int) -> list[list[Sequence[Segment]]]:
    """Consecutive sessions grouped into calls of at most `batch_tokens` prompt tokens
    (estimated) and MAX_SEGMENTS_PER_CALL segments; a session is never split, and one
    larger than the limit gets a call of its own. 0 tokens: one session per call."""
    batches: list[list[Sequence[Segment]]] = []
    tokens = count = 0
    for segments in sessions:
        size = sum(estimate_tokens(render_transcript(s.messages)) for s in segments)
        if not batches or tokens + size > batch_tokens or count + len(segments) > MAX_SEGMENTS_PER_CALL:
            batches.append([])
            tokens = count = 0
        batches[-1].append(segments)
        tokens += size
        count += len(segments)
    return batches


def judge_days(pool: ConnectionPool, partition_keys: Sequence[str], judge: ModelBackend, ctx: CallContext,
               concurrency: int = 1) -> StageReport:
    """conversation_segments for each day: every non-temp session's segments, judged. The
    sessions whose judgement is not current share calls (`batch_tokens` of the decision
    model's configuration): a segment is short, and a call per session is most of the cost."""
    report = StageReport()
    for key in partition_keys:
        pending: list[list[Segment]] = []
        with pool.connection() as conn:
            by_session: dict[str, list[Message]] = defaultdict(list)
            for message in repository.messages_in_window(conn, _day_window(key)):
                by_session[message.session_id].append(message)
            for session_id, messages in sorted(by_session.items()):
                segments = cut_segments(messages)
                if not segments:
                    continue
                if repository.segment_judgement_current(conn, session_id, key,
                                                        judgement_fingerprint(segments, judge)):
                    report.counts["segments_reused"] += len(segments)
                else:
                    pending.append(segments)

        def work(batch: list[Sequence[Segment]], key=key) -> StageReport:
            part = StageReport()
            judgements = judge_sessions(batch, judge)
            call = judgements[0].call
            with pool.connection() as conn:
                with conn.transaction():
                    repository.insert_llm_calls(conn, [call], run_id=ctx.run_id, asset=ctx.asset, partition_key=key,
                                                session_id=batch[0][0].session_id if len(batch) == 1 else None)
                part.calls.append(call)
                part.counts["judge_calls_shared"] += len(batch) > 1
                for judgement in judgements:
                    session_id = judgement.judged[0].segment.session_id
                    with conn.transaction():
                        repository.lock_sessions(conn, [session_id])
                        # a concurrent run may have stored the same judgement while this one asked
                        if not repository.segment_judgement_current(conn, session_id, key, judgement.fingerprint):
                            part.merge(_store_judgement(conn, key, judgement, judge, ctx))
            return part

        report.merge(_parallel(pack_sessions(pending, judge.config.batch_tokens), work, concurrency))
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
                        report.versions_by_kind[v.kind] += 1
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
                        report.failures.append(StageFailure(
                            session_id, event.partition_key, f"chunk {event.step}: {event.reason}",
                            any(c.budget_reached for c in event.calls)))
                        report.counts["sessions_incomplete"] += 1
        report.counts["sessions"] += 1
        return report

    return _parallel(sessions, work, concurrency)


STALE_AFTER = timedelta(minutes=SPECS["MEMORY_STALE_MINUTES"].default)


def _facts_hash(facts) -> str:
    return hashlib.sha256(json.dumps(sorted((f.category, f.key, f.value) for f in facts),
                                     ensure_ascii=False).encode()).hexdigest()


def refresh_memory_summary(conn: psycopg.Connection, user_id: str, writer: ModelBackend, ctx: CallContext,
                           partition_key: str) -> StageReport:
    """Rewrite the user's memory_summary from all current facts, unless they did not change."""
    report = StageReport()
    facts = repository.facts_for_user(conn, user_id)
    digest = _facts_hash(facts)
    if not facts or repository.memory_summary_hash(conn, user_id) == digest:
        return report
    try:
        content, call = writer.summarize_facts([(f.category, f.key, f.value) for f in facts])
    except ModelError as exc:
        call, content = exc.call, None
        report.failures.append(StageFailure(None, None, str(exc), exc.call.budget_reached, user_id))
    repository.insert_llm_calls(conn, [call], run_id=ctx.run_id, asset=ctx.asset, partition_key=partition_key,
                                session_id=None)
    report.calls.append(call)
    if content is not None:
        repository.upsert_memory_summary(conn, user_id, content, len(facts), digest, writer.model,
                                         writer.prompt_version(SUMMARIZE_FACTS), ctx.run_id)
        report.counts["memory_summaries_written"] += 1
    return report


def extract_facts_for_days(pool: ConnectionPool, partition_keys: Sequence[str], extractor: ModelBackend,
                           ctx: CallContext, *, stale_after: timedelta = STALE_AFTER,
                           concurrency: int = 1) -> StageReport:
    """memory_facts for each day: every session stale as of the day's end and not yet
    extracted through its last activity (a gap before the range is caught up), then the
    memory_summary of every user whose facts it touched or whose summary is behind their
    facts (an earlier rewrite failed)."""
    report = StageReport()
    for key in partition_keys:
        end = _day_window(key).end
        with pool.connection() as conn:
            due = repository.sessions_due_for_extraction(conn, end, end - stale_after)

        def work(session: repository.DueSession, key=key, end=end) -> StageReport:
            part = StageReport()
            with pool.connection() as conn, conn.transaction():
                repository.lock_sessions(conn, [session.session_id])
                if repository.session_judging_failed(conn, session.session_id, key):
                    # its noise is not known yet: facts taken from noise now would stay for good
                    part.failures.append(StageFailure(session.session_id, None,
                                                      "noise judging failed, extraction left due"))
                    part.counts["sessions_failed"] += 1
                    return part
                messages = repository.session_messages_before(conn, session.session_id, end)
                dropped = repository.session_dropped_seqs(conn, session.session_id)
                kept = [m for m in messages if m.seq not in dropped and m.role != "system"]
                lineage = {"partition_key": key, "run_id": ctx.run_id, "model": extractor.model,
                           "prompt_version": extractor.prompt_version(EXTRACT_FACTS)}
                try:
                    items, call = extractor.extract_facts(kept, render_for_extraction(messages, dropped))
                except ModelError as exc:
                    repository.insert_llm_calls(conn, [exc.call], run_id=ctx.run_id, asset=ctx.asset,
                                                partition_key=key, session_id=session.session_id)
                    part.calls.append(exc.call)
                    part.failures.append(StageFailure(session.session_id, None, f"extraction failed, left due: {exc}",
                                                      exc.call.budget_reached))
                    part.counts["sessions_failed"] += 1
                    return part
                repository.insert_llm_calls(conn, [call], run_id=ctx.run_id, asset=ctx.asset, partition_key=key,
                                            session_id=session.session_id)
                part.calls.append(call)
                accepted, rejected = validate_items(items, messages) if messages else ([], [])
                repository.lock_user(conn, session.user_id)
                repository.upsert_facts(conn, session.user_id, accepted, {"session_id": session.session_id, **lineage})
                repository.insert_fact_rejections(conn, session.user_id, session.session_id, rejected, lineage)
                repository.mark_session_extracted(conn, session, end, len(accepted), len(rejected), key, ctx.run_id)
            part.counts["sessions_extracted"] += 1
            part.counts["facts_accepted"] += len(accepted)
            part.counts["facts_rejected"] += len(rejected)
            part.preview.extend({"session": session.session_id, "category": c.category, "key": c.key,
                                 "value": c.value, "source": c.source, "confidence": c.confidence} for c in accepted)
            part.users.add(session.user_id)
            part.sessions.add(session.session_id)
            return part

        day = _parallel(due, work, concurrency)
        report.merge(day)
        with pool.connection() as conn:
            outdated = repository.users_with_outdated_memory_summary(conn)
        for user_id in sorted(day.users | set(outdated)):
            with pool.connection() as conn, conn.transaction():
                repository.lock_user(conn, user_id)
                report.merge(refresh_memory_summary(conn, user_id, extractor, ctx, key))
    return report


def pack_chunks_for_days(pool: ConnectionPool, partition_keys: Sequence[str], ctx: CallContext, *,
                         stale_after: timedelta = STALE_AFTER, window: int = CONTEXT_WINDOW_MESSAGES) -> StageReport:
    """memory_chunks for each day: what left each session's context window as of the
    day's end, packed from the last chunk on. A day is a few set-based statements over all
    its sessions (locked together, in session order), not a round trip per session."""
    report = StageReport()
    for key in partition_keys:
        day = _day_window(key)
        with pool.connection() as conn, conn.transaction():
            # sessions active in the day, or gone stale early in it
            session_ids = list(dict.fromkeys(s for s, _ in repository.sessions_in_window(
                conn, TimeWindow(day.start - stale_after, day.end))))
            repository.lock_sessions(conn, session_ids)
            states = repository.chunk_window_states(conn, session_ids, day.end, window)
            pending = repository.chunk_pending_messages(conn, states, day.end)
            packed = {}
            for state in states:
                stale = state.last_ts is not None and state.last_ts < day.end - stale_after
                chunks = pack_chunks(pending.get(state.session_id, []), state.eligible, stale)
                if chunks:
                    packed[state.session_id] = chunks
            summary_keys = repository.summary_keys_as_of_sessions(conn, list(packed), key)
            rows = []
            for session_id, chunks in packed.items():
                version, keys = summary_keys.get(session_id, (None, []))
                rows += [{**asdict(c), "content_hash": c.content_hash, "breadcrumbs": chunk_breadcrumbs(c, keys),
                          "summary_version": version, "partition_key": key, "run_id": ctx.run_id,
                          "model": "chunker", "prompt_version": PACKER_VERSION} for c in chunks]
                report.sessions.add(session_id)
                report.counts["messages_chunked"] += sum(c.message_count for c in chunks)
            report.counts["chunks_written"] += repository.insert_chunks(conn, rows)
            report.preview.extend({"session": r["session_id"], "seqs": f"{r['start_seq']}-{r['end_seq']}",
                                   "chars": len(r["content"]), "breadcrumbs": ", ".join(r["breadcrumbs"][:6]),
                                   "content": r["content"]} for r in rows)
        report.counts["sessions"] += len(session_ids)
    return report


def collect_sketches(pool: ConnectionPool, partition_keys: Sequence[str], ctx: CallContext) -> StageReport:
    """sketches for each day: the scratchpad tool's writes found in the transcripts
    (`{"action": "set", "section", "key", "value", "scope"}`), newest write wins."""
    report = StageReport()
    for key in partition_keys:
        window = _day_window(key)
        with pool.connection() as conn, conn.transaction():
            for session_id, seq, user_id, ts, args in conn.execute(
                    query("scratchpad_writes"), {"start": window.start, "end": window.end}).fetchall():
                args = args or {}
                if args.get("action", "set") not in ("set", "update", "write") or not args.get("key"):
                    report.counts["scratchpad_reads"] += 1
                    continue
                scope = "user" if args.get("scope") == "user" else "session"
                conn.execute(query("upsert_sketch"), {
                    "user_id": user_id, "scope": scope, "session_id": session_id,
                    "scope_key": session_id if scope == "session" else "", "section": str(args.get("section") or
                                                                                         "notes"),
                    "key": str(args["key"]), "value": str(args.get("value", "")), "updated_at": ts,
                    "source": "transcript", "source_seq": seq, "partition_key": key, "run_id": ctx.run_id})
                report.counts["sketch_writes"] += 1
                report.preview.append({"session": session_id, "section": args.get("section"), "key": args["key"],
                                       "value": args.get("value"), "scope": scope})
    return report


@dataclass(frozen=True)
class KnowledgeSettings:
    sanitize_pii: bool = True
    ttl_seconds: int | None = None
    consent_basis: str = "not_set"


def distill_knowledge_for_days(pool: ConnectionPool, partition_keys: Sequence[str], synthesizer: ModelBackend,
                               ctx: CallContext, settings: KnowledgeSettings = KnowledgeSettings(),
                               concurrency: int = 1) -> StageReport:
    """knowledge_entries and entity_graph for each day, in the four steps: ingest (each
    session's kept segments of the day), synthesize (one call per session-day), reconcile
    (against existing entries: same key, newer observation → new version; archived →
    left archived unless observed later) and forge (persist)."""
    report = StageReport()
    for key in partition_keys:
        window = _day_window(key)
        with pool.connection() as conn:
            by_session: dict[str, list[Message]] = defaultdict(list)
            for message in repository.messages_in_window(conn, window):
                by_session[message.session_id].append(message)

        def work(item, key=key) -> StageReport:
            session_id, day_messages = item
            part = StageReport()
            with pool.connection() as conn, conn.transaction():
                repository.lock_sessions(conn, [session_id])
                dropped = repository.dropped_seqs(conn, session_id, key)
                kept = [m for m in day_messages if m.seq not in dropped and m.role != "system"]
                if not kept:
                    return part
                user_id = kept[0].user_id
                summary = repository.summary_as_of(conn, session_id, key)
                fingerprint = hashlib.sha256(json.dumps([
                    [(m.seq, m.content_hash) for m in kept], summary.to_json() if summary else None,
                    synthesizer.name, synthesizer.model, synthesizer.prompt_version(SYNTHESIZE_KNOWLEDGE),
                    asdict(settings)], sort_keys=True).encode()).hexdigest()
                if conn.execute(query("knowledge_source_fingerprint"),
                                {"session_id": session_id, "partition_key": key}).fetchone() == (fingerprint,):
                    part.counts["session_days_unchanged"] += 1
                    return part  # these inputs were synthesized already: no model call
                lineage = {"session_id": session_id, "partition_key": key, "run_id": ctx.run_id,
                           "model": synthesizer.model,
                           "prompt_version": synthesizer.prompt_version(SYNTHESIZE_KNOWLEDGE)}
                try:
                    raw, call = synthesizer.synthesize_knowledge(kept, render_for_extraction(kept), summary)
                except ModelError as exc:
                    call, raw = exc.call, None
                    part.failures.append(StageFailure(session_id, key, f"knowledge synthesis failed: {exc}",
                                                      exc.call.budget_reached))
                repository.insert_llm_calls(conn, [call], run_id=ctx.run_id, asset=ctx.asset, partition_key=key,
                                            session_id=session_id)
                part.calls.append(call)
                if raw is None:
                    return part
                entries, relations, problems = prepare(
                    raw, kept, session_id, user_id, sanitize_pii=settings.sanitize_pii,
                    ttl_seconds=settings.ttl_seconds, consent_basis=settings.consent_basis)
                written = repository.forge_knowledge(conn, entries, lineage)
                repository.forge_relations(conn, user_id, relations, lineage)
                conn.execute(query("record_knowledge_source"), {"session_id": session_id, "partition_key": key,
                                                                "fingerprint": fingerprint, "entries": len(entries),
                                                                "run_id": ctx.run_id})
            part.counts["entries_written"] += written
            part.counts["entries_seen"] += len(entries)
            part.counts["entries_dropped"] += len(problems)
            part.counts["relations"] += len(relations)
            part.counts["entries_with_pii"] += sum(e.has_pii for e in entries)
            part.users.add(user_id)
            part.preview.extend({"session": session_id, "kind": e.kind, "title": e.title, "scope": e.scope,
                                 "importance": e.importance, "pii": ",".join(e.pii_kinds)} for e in entries)
            return part

        report.merge(_parallel(sorted(by_session.items()), work, concurrency))
    return report


def collect_error_memory(pool: ConnectionPool, partition_keys: Sequence[str], ctx: CallContext) -> StageReport:
    """error_memory for each day: resolved tool errors of the sessions that failed a tool
    call that day (a fix found later in the session counts when that day is run)."""
    report = StageReport()
    for key in partition_keys:
        window = _day_window(key)
        with pool.connection() as conn, conn.transaction():
            for (session_id,) in conn.execute(query("window_tool_sessions"),
                                              {"start": window.start, "end": window.end}).fetchall():
                messages = repository.session_messages_before(conn, session_id, window.end)
                for fix in resolved_errors(messages):
                    conn.execute(query("upsert_error_memory"), {
                        **asdict(fix), "user_id": messages[0].user_id, "session_id": session_id,
                        "expires_at": fix.observed_at + ERROR_TTL, "partition_key": key, "run_id": ctx.run_id})
                    report.counts["resolved_errors"] += 1
                    report.preview.append({"session": session_id, "tool": fix.tool, "error": fix.error,
                                           "fix": fix.fix})
    return report

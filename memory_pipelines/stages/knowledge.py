"""Stage `knowledge_entries` + `entity_graph`, in the four steps: ingest (each session's
kept segments of the day), synthesize (one call per session-day), reconcile (against
existing entries: same key, newer observation → new version; archived → left archived
unless observed later) and forge (persist)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from psycopg_pool import ConnectionPool

from memory_pipelines.db import repository
from memory_pipelines.facts import render_for_extraction
from memory_pipelines.knowledge import EntryCandidate, RelationCandidate, prepare
from memory_pipelines.llm.backends import ModelBackend, ModelCall, ModelError
from memory_pipelines.llm.prompts import SYNTHESIZE_KNOWLEDGE
from memory_pipelines.records import Message, Summary
from memory_pipelines.stages.common import (
    Backends, CallContext, Counts, StageFailure, StageReport, Window, map_parallel, session_batches,
)

ASSET = "knowledge_entries"


@dataclass(frozen=True)
class Settings:
    sanitize_pii: bool = True
    ttl_seconds: int | None = None
    consent_basis: str = "not_set"
    concurrency: int = 1


@dataclass
class KnowledgeCounts(Counts):
    entries_seen: int = 0
    entries_written: int = 0
    entries_dropped: int = 0
    entries_with_pii: int = 0
    relations: int = 0
    session_days_unchanged: int = 0


def synthesis_fingerprint(kept: Sequence[Message], summary: Summary | None, synthesizer: ModelBackend,
                          settings: Settings) -> str:
    """What a session-day's synthesis follows from: its kept messages, the summary as of the
    day, the model and prompt, and the settings that shape the entries (not concurrency)."""
    shaping = {k: v for k, v in asdict(settings).items() if k != "concurrency"}
    return hashlib.sha256(json.dumps([
        [(m.seq, m.content_hash) for m in kept], summary.to_json() if summary else None,
        synthesizer.name, synthesizer.model, synthesizer.prompt_version(SYNTHESIZE_KNOWLEDGE),
        shaping], sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class _Synthesis:
    session_id: str
    kept: list[Message]
    fingerprint: str
    raw: object  # the model's answer; None when the call failed
    call: ModelCall
    error: ModelError | None


def _synthesize_batch(pool: ConnectionPool, batch: Sequence[tuple[str, list[Message]]], key: str,
                      synthesizer: ModelBackend, ctx: CallContext, settings: Settings) -> StageReport[KnowledgeCounts]:
    """One transaction for a batch of a day's sessions: lock them, read their dropped seqs,
    summaries and stored fingerprints in one query each, synthesize the changed ones
    (`concurrency` at once), forge what came back."""
    report = StageReport(KnowledgeCounts(), calls_models=True)
    counts = report.counts
    ids = [session_id for session_id, _ in batch]
    with pool.connection() as conn, conn.transaction():
        repository.lock_sessions(conn, ids)
        dropped = repository.sessions_dropped_seqs(conn, ids, key)
        summaries = {sid: summary for sid, (_, summary) in repository.summaries_as_of_sessions(conn, ids, key).items()}
        stored = repository.knowledge_source_fingerprints(conn, ids, key)
        pending = []
        for session_id, day_messages in batch:
            drop = dropped.get(session_id, frozenset())
            kept = [m for m in day_messages if m.seq not in drop and m.role != "system"]
            if not kept:
                continue
            fingerprint = synthesis_fingerprint(kept, summaries.get(session_id), synthesizer, settings)
            if stored.get(session_id) == fingerprint:
                counts.session_days_unchanged += 1  # these inputs were synthesized already: no model call
            else:
                pending.append((session_id, kept, fingerprint))

        def ask(item: tuple[str, list[Message], str]) -> _Synthesis:
            session_id, kept, fingerprint = item
            try:
                raw, call = synthesizer.synthesize_knowledge(kept, render_for_extraction(kept),
                                                             summaries.get(session_id))
                return _Synthesis(session_id, kept, fingerprint, raw, call, None)
            except ModelError as exc:
                return _Synthesis(session_id, kept, fingerprint, None, exc.call, exc)

        lineage = {"partition_key": key, "run_id": ctx.run_id, "model": synthesizer.model,
                   "prompt_version": synthesizer.prompt_version(SYNTHESIZE_KNOWLEDGE)}
        answers = map_parallel(pending, ask, settings.concurrency)
        ctx.record_all(conn, [(answer.call, key, answer.session_id) for answer in answers])
        # every session's entries, triples and fingerprint written together: a few round trips a batch
        entries: list[tuple[EntryCandidate, dict]] = []
        relations: list[tuple[RelationCandidate, dict]] = []
        sources: list[dict] = []
        for answer in answers:
            session_id, user_id = answer.session_id, answer.kept[0].user_id
            report.calls.append(answer.call)
            if answer.error is not None:
                report.failures.append(StageFailure(session_id, key, f"knowledge synthesis failed: {answer.error}",
                                                    answer.call.budget_reached))
                continue
            found, triples, problems = prepare(
                answer.raw, answer.kept, session_id, user_id, sanitize_pii=settings.sanitize_pii,
                ttl_seconds=settings.ttl_seconds, consent_basis=settings.consent_basis)
            entries += [(e, {"session_id": session_id, **lineage}) for e in found]
            relations += [(r, {"session_id": session_id, "user_id": user_id, **lineage}) for r in triples]
            sources.append({"session_id": session_id, "partition_key": key, "fingerprint": answer.fingerprint,
                            "entries": len(found), "run_id": ctx.run_id})
            counts.entries_seen += len(found)
            counts.entries_dropped += len(problems)
            counts.relations += len(triples)
            counts.entries_with_pii += sum(e.has_pii for e in found)
            report.users.add(user_id)
            report.preview.extend({"session": session_id, "kind": e.kind, "title": e.title, "scope": e.scope,
                                   "importance": e.importance, "pii": ",".join(e.pii_kinds)} for e in found)
        counts.entries_written += repository.forge_knowledge(conn, entries)
        repository.forge_relations(conn, relations)
        repository.record_knowledge_sources(conn, sources)
    return report


def run(pool: ConnectionPool, window: Window, settings: Settings,
        backends: Backends) -> StageReport[KnowledgeCounts]:
    synthesizer = backends.writer
    ctx = CallContext(window.run_id, ASSET)
    report = StageReport(KnowledgeCounts(), calls_models=True)
    for key, day in window.days(ASSET, only=window.active_days(pool)):
        with pool.connection() as conn:
            by_session = repository.messages_in_window(conn, day)
            # forks write no user-level knowledge: what it learns from them comes with a merge
            forks = repository.fork_points(conn, list(by_session))
            by_session = {s: m for s, m in by_session.items() if s not in forks}
        for batch in session_batches(sorted(by_session.items()), synthesizer, settings.concurrency):
            report.merge(_synthesize_batch(pool, batch, key, synthesizer, ctx, settings))
    return report

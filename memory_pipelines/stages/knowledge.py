"""Stage `knowledge_entries` + `entity_graph`, in the four steps: ingest (each session's
kept segments of the day), synthesize (one call per session-day), reconcile (against
existing entries: same key, newer observation → new version; archived → left archived
unless observed later) and forge (persist)."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from psycopg_pool import ConnectionPool

from memory_pipelines.db import repository
from memory_pipelines.db.queries import query
from memory_pipelines.facts import render_for_extraction
from memory_pipelines.knowledge import prepare
from memory_pipelines.llm.backends import ModelBackend, ModelError
from memory_pipelines.llm.prompts import SYNTHESIZE_KNOWLEDGE
from memory_pipelines.records import Message, Summary
from memory_pipelines.stages.common import Backends, CallContext, Counts, StageFailure, StageReport, Window, run_parallel

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


def run(pool: ConnectionPool, window: Window, settings: Settings,
        backends: Backends) -> StageReport[KnowledgeCounts]:
    synthesizer = backends.writer
    ctx = CallContext(window.run_id, ASSET)
    report = StageReport(KnowledgeCounts(), calls_models=True)
    for key, day in window.days(ASSET):
        with pool.connection() as conn:
            by_session: dict[str, list[Message]] = defaultdict(list)
            for message in repository.messages_in_window(conn, day):
                by_session[message.session_id].append(message)

        def synthesize(item: tuple[str, list[Message]], key=key) -> StageReport[KnowledgeCounts]:
            session_id, day_messages = item
            part = StageReport(KnowledgeCounts(), calls_models=True)
            counts = part.counts
            with pool.connection() as conn, conn.transaction():
                repository.lock_sessions(conn, [session_id])
                dropped = repository.dropped_seqs(conn, session_id, key)
                kept = [m for m in day_messages if m.seq not in dropped and m.role != "system"]
                if not kept:
                    return part
                user_id = kept[0].user_id
                summary = repository.summary_as_of(conn, session_id, key)
                fingerprint = synthesis_fingerprint(kept, summary, synthesizer, settings)
                if conn.execute(query("knowledge_source_fingerprint"),
                                {"session_id": session_id, "partition_key": key}).fetchone() == (fingerprint,):
                    counts.session_days_unchanged += 1
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
                ctx.record(conn, [call], key, session_id)
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
            counts.entries_written += written
            counts.entries_seen += len(entries)
            counts.entries_dropped += len(problems)
            counts.relations += len(relations)
            counts.entries_with_pii += sum(e.has_pii for e in entries)
            part.users.add(user_id)
            part.preview.extend({"session": session_id, "kind": e.kind, "title": e.title, "scope": e.scope,
                                 "importance": e.importance, "pii": ",".join(e.pii_kinds)} for e in entries)
            return part

        run_parallel(sorted(by_session.items()), synthesize, report, settings.concurrency)
    return report

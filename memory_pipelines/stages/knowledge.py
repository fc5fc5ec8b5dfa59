"""Stage `knowledge_entries` + `entity_graph`, in the four steps: ingest (the chunks each
session's summary distilled on the day), synthesize (what those distillation calls wrote:
no model call of its own), reconcile (against existing entries: same key, newer observation
→ new version; archived → left archived unless observed later) and forge (persist)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

from psycopg_pool import ConnectionPool

from memory_pipelines.db import entries as entries_db
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.digests import json_digest
from memory_pipelines.core.knowledge_entries import EntryCandidate, RelationCandidate, prepare
from memory_pipelines.stages.common import (
    BATCH_SESSIONS, Backends, CallContext, Counts, StageReport, Window, chunk_spans,
)

ASSET = "knowledge_entries"


@dataclass(frozen=True)
class Settings:
    sanitize_pii: bool = True
    ttl_seconds: int | None = None
    consent_basis: str = "not_set"


@dataclass
class KnowledgeCounts(Counts):
    entries_seen: int = 0
    entry_writes: int = 0  # inserts and updates: an entry seen again on a later day is written again
    entries_dropped: int = 0
    entries_with_pii: int = 0
    relations: int = 0
    session_days_unchanged: int = 0


def synthesis_fingerprint(chunks: Sequence[summaries_db.DistilledChunk], settings: Settings) -> str:
    """What a session-day's entries follow from: the day's chunk versions (each fingerprint
    chains everything its distillation read, model and prompt included) and the settings that
    shape the entries."""
    return json_digest([[c.fingerprint for c in chunks], asdict(settings)], sort_keys=True)


def _forge_batch(pool: ConnectionPool, batch: Sequence[tuple[str, str, list[summaries_db.DistilledChunk]]],
                 ctx: CallContext, settings: Settings) -> StageReport[KnowledgeCounts]:
    """One transaction for a batch of session-days (day, session, its chunks), in day order: lock
    the sessions, read their stored fingerprints and the messages their chunks read in one query
    each, validate the changed session-days' entries and relations item by item, forge what holds."""
    report = StageReport(KnowledgeCounts())
    counts = report.counts
    with pool.connection() as conn, conn.transaction():
        summaries_db.lock_sessions(conn, [session_id for _, session_id, _ in batch])
        stored = entries_db.knowledge_source_fingerprints(conn, [(key, session_id) for key, session_id, _ in batch])
        pending = []
        for key, session_id, chunks in batch:
            fingerprint = synthesis_fingerprint(chunks, settings)
            if stored.get((key, session_id)) == fingerprint:
                counts.session_days_unchanged += 1  # these chunks were forged already
            else:
                pending.append((key, session_id, chunks, fingerprint))
        messages = summaries_db.chunks_kept_messages(conn, [c for _, _, chunks, _ in pending for c in chunks])
        # every session-day's entries, triples and fingerprint written together: a few round trips a batch
        entries: list[tuple[EntryCandidate, dict]] = []
        relations: list[tuple[RelationCandidate, dict]] = []
        sources: list[dict] = []
        for key, session_id, chunks, fingerprint in pending:
            found_count = 0
            for chunk, kept in chunk_spans(chunks, messages.get(session_id, [])):
                if not kept:
                    continue
                user_id = chunk.user_id
                found, triples, problems = prepare(
                    chunk.memory_items, kept, session_id, user_id, sanitize_pii=settings.sanitize_pii,
                    ttl_seconds=settings.ttl_seconds, consent_basis=settings.consent_basis)
                lineage = {"session_id": session_id, "partition_key": key, "run_id": ctx.run_id,
                           "model": chunk.model, "prompt_version": chunk.prompt_version, "call_id": chunk.call_id}
                entries += [(e, lineage) for e in found]
                relations += [(r, {"user_id": user_id, **lineage}) for r in triples]
                found_count += len(found)
                counts.entries_seen += len(found)
                counts.entries_dropped += len(problems)
                counts.relations += len(triples)
                counts.entries_with_pii += sum(e.has_pii for e in found)
                report.users.add(user_id)
                report.preview.extend({"session": session_id, "kind": e.kind, "title": e.title, "scope": e.scope,
                                       "importance": e.importance, "pii": ",".join(e.pii_kinds)} for e in found)
            sources.append({"session_id": session_id, "partition_key": key, "fingerprint": fingerprint,
                            "entries": found_count, "run_id": ctx.run_id})
        counts.entry_writes += entries_db.forge_knowledge(conn, entries)
        entries_db.forge_relations(conn, relations)
        entries_db.record_knowledge_sources(conn, sources)
    return report


def run(pool: ConnectionPool, window: Window, settings: Settings,
        backends: Backends) -> StageReport[KnowledgeCounts]:
    """Each day's chunk versions, session by session (forks write no user-level knowledge:
    what it learns from them comes with a merge)."""
    ctx = CallContext(window.run_id, ASSET)
    report = StageReport(KnowledgeCounts())
    # a batch holds several days' session-days, in day order: a long backfill's few sessions a
    # day do not each pay a transaction's round trips
    pending: list[tuple[str, str, list[summaries_db.DistilledChunk]]] = []
    for key, _ in window.days(ASSET, only=window.active_days(pool)):
        with pool.connection() as conn:
            by_session = summaries_db.distilled_chunks(conn, None, day=key, shard=window.shard)
        pending += [(key, session_id, chunks) for session_id, chunks in sorted(by_session.items())]
        while len(pending) >= BATCH_SESSIONS:
            report.merge(_forge_batch(pool, pending[:BATCH_SESSIONS], ctx, settings))
            pending = pending[BATCH_SESSIONS:]
    if pending:
        report.merge(_forge_batch(pool, pending, ctx, settings))
    return report

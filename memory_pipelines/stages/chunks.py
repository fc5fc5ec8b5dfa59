"""Stage `memory_chunks`: what left each session's context window, packed into chunks from
the last chunk on. A day is a few set-based statements over all its sessions (locked
together, in session order), not a round trip per session."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from psycopg_pool import ConnectionPool

from memory_pipelines.core.chunk_packing import PACKER_VERSION, chunk_breadcrumbs, pack_chunks
from memory_pipelines.config import SPECS
from memory_pipelines.db import facts_chunks as facts_chunks_db
from memory_pipelines.db import entries as entries_db
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.records import TimeWindow, shallow_fields
from memory_pipelines.stages.common import NO_BACKENDS, Backends, Counts, Slices, StageReport, Window

ASSET = "memory_chunks"


@dataclass(frozen=True)
class Settings:
    stale_after: timedelta = timedelta(minutes=SPECS["MEMORY_STALE_MINUTES"].default)
    # the last messages that stay in the context, not chunked yet
    window: int = SPECS["MEMORY_CONTEXT_MESSAGES"].default


@dataclass
class ChunkCounts(Counts):
    sessions_considered: int = 0
    chunks_written: int = 0
    messages_chunked: int = 0


def run(pool: ConnectionPool, window: Window, settings: Settings,
        backends: Backends = NO_BACKENDS) -> StageReport[ChunkCounts]:
    """Chunks for each day: what left each session's context window as of the day's end."""
    report = StageReport(ChunkCounts())
    counts = report.counts
    # days share a transaction for up to COMMIT_SECONDS (a commit per day was most of a long
    # backfill's chunking); a day whose sessions another transaction holds begins a new one
    with pool.connection() as conn, Slices(conn) as slices:
        for key, day in window.days(ASSET, only=window.active_days(pool, settings.stale_after)):
            # sessions active in the day, or gone stale early in it
            session_ids = list(dict.fromkeys(s for s, _ in summaries_db.sessions_in_window(
                conn, TimeWindow(day.start - settings.stale_after, day.end), window.shard)))
            with slices.item(session_ids):
                states = facts_chunks_db.chunk_window_states(conn, session_ids, day.end, settings.window)
                pending = facts_chunks_db.chunk_pending_messages(conn, states, day.end)
                packed = {}
                for state in states:
                    stale = state.last_ts is not None and state.last_ts < day.end - settings.stale_after
                    chunks = pack_chunks(pending.get(state.session_id, []), state.eligible, stale)
                    if chunks:
                        packed[state.session_id] = chunks
                summaries = entries_db.summaries_as_of_sessions(conn, list(packed), key)
                rows = []
                for session_id, chunks in packed.items():
                    version, summary = summaries.get(session_id, (None, None))
                    keys = list(summary.keys) if summary is not None else []
                    rows += [{**shallow_fields(c), "content_hash": c.content_hash,
                              "breadcrumbs": chunk_breadcrumbs(c, keys),
                              "summary_version": version, "partition_key": key, "run_id": window.run_id,
                              "model": "chunker", "prompt_version": PACKER_VERSION} for c in chunks]
                    report.sessions.add(session_id)
                    counts.messages_chunked += sum(c.message_count for c in chunks)
                counts.chunks_written += facts_chunks_db.insert_chunks(conn, rows)
                report.preview.extend({"session": r["session_id"], "seqs": f"{r['start_seq']}-{r['end_seq']}",
                                       "chars": len(r["content"]), "breadcrumbs": ", ".join(r["breadcrumbs"][:6]),
                                       "content": r["content"]} for r in rows)
            counts.sessions_considered += len(session_ids)
    report.check_scope = {"session_ids": sorted(report.sessions)}
    return report

"""Stage `memory_turns`: the turn-level index search serves passages from. Every session
with messages in the window's days, or whose chunks or summary those days' runs wrote, is
indexed again as it is now (unchanged rows are left alone), once for the whole window (a
session is indexed from all its messages and current keys, so a day-by-day run ends the
same), then the per-user corpus statistics refreshed."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from psycopg_pool import ConnectionPool

from memory_pipelines.db import facts_chunks as facts_chunks_db
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.db import turns as turns_db
from memory_pipelines.stages.common import NO_BACKENDS, Backends, Counts, StageReport, Window, session_batches
from memory_pipelines.core.turn_index import build_turns

ASSET = "memory_turns"


@dataclass
class TurnCounts(Counts):
    sessions_indexed: int = 0
    turns_written: int = 0
    turns_removed: int = 0
    languages: Counter = field(default_factory=Counter)  # sessions per text search configuration


def run(pool: ConnectionPool, window: Window, settings: None = None,
        backends: Backends = NO_BACKENDS) -> StageReport[TurnCounts]:
    report = StageReport(TurnCounts())
    counts = report.counts
    with pool.connection() as conn:
        sessions = turns_db.sessions_to_index(conn, window.span.start, window.span.end, window.first, window.last,
                                              window.shard)
    for batch in session_batches(sessions):
        with pool.connection() as conn, conn.transaction():
            summaries_db.lock_sessions(conn, batch)
            messages = facts_chunks_db.sessions_messages(conn, batch)
            keys = turns_db.sessions_search_keys(conn, batch)
            rows = []
            for session_id in batch:
                session_rows = build_turns(messages.get(session_id, []), keys.get(session_id, []))
                if session_rows:
                    counts.languages[session_rows[0].language] += 1
                rows += session_rows
            written, removed = turns_db.store_turns(conn, batch, rows, window.run_id)
        counts.turns_written += written
        counts.turns_removed += removed
        report.sessions.update(batch)
        report.users.update(r.user_id for r in rows)
    with pool.connection() as conn, conn.transaction():
        turns_db.refresh_turn_stats(conn, sorted(report.users))
    counts.sessions_indexed = len(report.sessions)
    report.check_scope = {"session_ids": sorted(report.sessions)}
    return report

"""Stage `error_memory`: resolved tool errors of the sessions that failed a tool call that
day (a fix found later in the session counts when that day is run)."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from memory_pipelines.db import facts_chunks as facts_chunks_db
from memory_pipelines.db import entries as entries_db
from memory_pipelines.core.knowledge_entries import ERROR_TTL, resolved_errors
from memory_pipelines.records import shallow_fields
from memory_pipelines.stages.common import NO_BACKENDS, Backends, Counts, Slices, StageReport, Window

ASSET = "error_memory"


@dataclass
class ErrorCounts(Counts):
    resolved_errors: int = 0


def run(pool: ConnectionPool, window: Window, settings: None = None,
        backends: Backends = NO_BACKENDS) -> StageReport[ErrorCounts]:
    report = StageReport(ErrorCounts())
    # one read for the range (most days have no failed call); the days' writes share a commit
    # for up to COMMIT_SECONDS
    with pool.connection() as conn, Slices(conn) as slices:
        failures = entries_db.tool_failure_days(conn, window.span, window.shard)
        for key, day in window.days(ASSET, only=failures):
            with slices.item():
                rows = []
                for session_id, messages in facts_chunks_db.sessions_messages(conn, failures[key], day.end).items():
                    for fix in resolved_errors(messages):
                        rows.append({**shallow_fields(fix), "user_id": messages[0].user_id, "session_id": session_id,
                                     "expires_at": fix.observed_at + ERROR_TTL, "partition_key": key,
                                     "run_id": window.run_id})
                        report.preview.append({"session": session_id, "tool": fix.tool, "error": fix.error,
                                               "fix": fix.fix})
                entries_db.upsert_error_memory(conn, rows)
                report.counts.resolved_errors += len(rows)
    return report

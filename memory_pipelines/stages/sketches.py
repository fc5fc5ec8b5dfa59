"""Stage `sketches`: the scratchpad tool's writes found in the transcripts
(`{"action": "set", "section", "key", "value", "scope"}`), by (section, key) and scope,
the newest write winning."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from memory_pipelines.db import search as search_db
from memory_pipelines.stages.common import NO_BACKENDS, Backends, Counts, StageReport, Window

ASSET = "sketches"
WRITE_ACTIONS = ("set", "update", "write")


@dataclass
class SketchCounts(Counts):
    sketch_writes: int = 0
    scratchpad_reads_skipped: int = 0


def run(pool: ConnectionPool, window: Window, settings: None = None,
        backends: Backends = NO_BACKENDS) -> StageReport[SketchCounts]:
    """For each day, its scratchpad writes in one batch (in transcript order, so the newest wins)."""
    report = StageReport(SketchCounts())
    for key, day in window.days(ASSET, only=window.active_days(pool)):
        with pool.connection() as conn, conn.transaction():
            rows = []
            for session_id, seq, user_id, ts, args in search_db.scratchpad_writes(conn, day.start, day.end,
                                                                                   window.shard):
                args = args or {}
                if args.get("action", "set") not in WRITE_ACTIONS or not args.get("key"):
                    report.counts.scratchpad_reads_skipped += 1
                    continue
                scope = "user" if args.get("scope") == "user" else "session"
                rows.append({
                    "user_id": user_id, "scope": scope, "session_id": session_id,
                    "scope_key": session_id if scope == "session" else "",
                    "section": str(args.get("section") or "notes"), "key": str(args["key"]),
                    "value": str(args.get("value", "")), "updated_at": ts, "source": "transcript", "source_seq": seq,
                    "partition_key": key, "run_id": window.run_id})
                report.preview.append({"session": session_id, "section": args.get("section"), "key": args["key"],
                                       "value": args.get("value"), "scope": scope})
            search_db.upsert_sketches(conn, rows)
            report.counts.sketch_writes += len(rows)
    return report

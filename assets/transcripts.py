"""Asset `transcripts`: the message archive (`messages`, `sessions`, `quarantine`)."""

from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import dagster as dg

from assets.asset_checks import partition_scope, quality_check_results, quality_check_specs
from assets.partitions import DAILY_ASSET
from assets.resources import PostgresResource, TranscriptSource
from memory_pipelines.db import repository
from memory_pipelines.ingest import plan_ingest
from memory_pipelines.records import TimeWindow
from memory_pipelines.reporting import markdown_table
from memory_pipelines.transcripts import SKIPPED_SHOWN, describe_skipped, scan_transcripts


def partition_label(context: dg.AssetExecutionContext) -> str:
    keys = context.partition_key_range
    return keys.start if keys.start == keys.end else f"{keys.start}..{keys.end}"


@dg.asset(
    **DAILY_ASSET,
    check_specs=quality_check_specs("transcripts"),
    group_name="ingestion",
    kinds={"duckdb", "postgres"},
    tags={"stage": "ingest"},
    description=(
        "Every transcript message whose time falls in the partition, scanned by DuckDB from "
        "JSON Lines, Parquet and history.json files, validated, and archived in `messages` "
        "(unique on session_id, seq) with `sessions` kept in step. Refused records go to "
        "`quarantine` with their reason; records of users forgotten on request are skipped; "
        "read = stored + duplicate + quarantined + forgotten."
    ),
)
def transcripts(
    context: dg.AssetExecutionContext, postgres: PostgresResource, transcript_source: TranscriptSource
) -> Iterator:
    bounds = context.partition_time_window
    window = TimeWindow(bounds.start, bounds.end)
    # records no readable time dates go to the run's own range (there are any only when
    # nothing in the location has a readable time)
    scan = scan_transcripts(
        Path(transcript_source.path), window, timezone=transcript_source.timezone,
        max_bytes=transcript_source.max_message_bytes, include_undated=True,
    )
    session_ids = sorted({m.session_id for m in scan.messages})
    label = partition_label(context)
    with postgres.connection() as conn, conn.transaction():
        repository.lock_transcript_writes(conn)
        stored, owners = repository.stored_messages(conn, session_ids)
        forgotten = repository.forgotten_for(conn, sorted({m.user_id for m in scan.messages}))
        plan = plan_ingest(scan, stored, owners, forgotten)
        repository.insert_messages(conn, plan.new, context.run_id)
        repository.insert_quarantine(conn, plan.quarantined, label, context.run_id)
        written = sorted({m.session_id for m in plan.new})
        repository.refresh_sessions(conn, written)
        totals = repository.row_counts(conn, repository.ARCHIVE_TABLES)

    reasons = Counter(str(r.reason) for r in plan.quarantined)
    context.log.info(
        "%s: read %d, stored %d, duplicate %d, quarantined %d", label,
        plan.read, len(plan.new), plan.duplicates, len(plan.quarantined),
    )
    if scan.skipped_files:
        context.log.warning("%s: %s", label, describe_skipped(scan.skipped_files))
    preview = [
        {"session": m.session_id, "seq": m.seq, "user": m.user_id, "role": m.role, "ts": m.ts.isoformat(),
         "content": m.content}
        for m in plan.new
    ]
    yield dg.MaterializeResult(
        metadata={
            "partition_window": f"{window.start.isoformat()} .. {window.end.isoformat()}",
            "files_scanned": scan.files,
            "files_skipped": len(scan.skipped_files),
            "files_skipped_first": list(scan.skipped_files[:SKIPPED_SHOWN]),
            "read": plan.read,
            "stored": len(plan.new),
            "duplicate": plan.duplicates,
            "quarantined": len(plan.quarantined),
            "forgotten": plan.forgotten,
            "quarantined_by_reason": dict(sorted(reasons.items())),
            "sessions_touched": len(written),
            "table_rows": totals,
            "dagster/row_count": len(plan.new),
            "preview": dg.MetadataValue.md(
                markdown_table(preview, ["session", "seq", "user", "role", "ts", "content"])
            ),
            "quarantine_preview": dg.MetadataValue.md(
                markdown_table([asdict(r) for r in plan.quarantined], ["source_file", "source_line", "reason", "detail"])
            ),
        }
    )
    yield from quality_check_results(postgres, partition_scope(context, session_ids=written, partition_label=label),
                                     "transcripts")

"""Stage `transcripts`: every transcript record whose time falls in the window, scanned by
DuckDB, validated and archived in `messages` with `sessions` kept in step; refused records
go to `quarantine` with their reason. read = stored + duplicate + quarantined + forgotten."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from psycopg_pool import ConnectionPool

from memory_pipelines.config import SPECS
from memory_pipelines.db import repository
from memory_pipelines.ingest import plan_ingest
from memory_pipelines.stages.common import NO_BACKENDS, Backends, Counts, StageReport, Window
from memory_pipelines.transcripts import SKIPPED_SHOWN, describe_skipped, scan_transcripts

ASSET = "transcripts"


@dataclass(frozen=True)
class Settings:
    path: Path = SPECS["MEMORY_TRANSCRIPTS"].default
    timezone: str = SPECS["MEMORY_TIMEZONE"].default
    max_message_bytes: int = SPECS["MEMORY_MAX_MESSAGE_BYTES"].default


@dataclass
class TranscriptCounts(Counts):
    partition_window: str = ""
    files_scanned: int = 0
    files_skipped: int = 0
    files_skipped_first: list[str] = field(default_factory=list)
    read: int = 0
    stored: int = 0
    duplicate: int = 0
    quarantined: int = 0
    forgotten: int = 0
    superseded: int = 0  # re-sent turns a replace merge set aside
    forks_declared: int = 0
    quarantined_by_reason: Counter = field(default_factory=Counter)
    sessions_touched: int = 0
    table_rows: dict[str, int] = field(default_factory=dict)  # the archive tables' sizes afterwards


def run(pool: ConnectionPool, window: Window, settings: Settings,
        backends: Backends = NO_BACKENDS) -> StageReport[TranscriptCounts]:
    span = window.span
    # records no readable time dates go to the run's own range (there are any only when
    # nothing in the location has a readable time)
    scan = scan_transcripts(Path(settings.path), span, timezone=settings.timezone,
                            max_bytes=settings.max_message_bytes, include_undated=True)
    session_ids = sorted({m.session_id for m in scan.messages})
    with pool.connection() as conn, conn.transaction():
        repository.lock_transcript_writes(conn)
        stored, owners = repository.stored_messages(conn, session_ids)
        parents = sorted({m.parent_session_id for m in scan.messages if m.parent_session_id is not None})
        owners |= repository.session_owners(conn, parents)
        forks = repository.fork_points(conn, sorted({*session_ids, *parents}))
        forgotten = repository.forgotten_for(conn, sorted({m.user_id for m in scan.messages}))
        plan = plan_ingest(scan, stored, owners, forgotten, forks, repository.superseded_keys(conn, session_ids))
        repository.insert_fork_points(conn, plan.forks, "transcript")
        repository.insert_messages(conn, plan.new, window.run_id)
        repository.insert_quarantine(conn, plan.quarantined, window.label, window.run_id)
        written = sorted({m.session_id for m in plan.new})
        repository.refresh_sessions(conn, written)
        totals = repository.row_counts(conn, repository.ARCHIVE_TABLES)
    report = StageReport(TranscriptCounts(
        partition_window=f"{span.start.isoformat()} .. {span.end.isoformat()}", files_scanned=scan.files,
        files_skipped=len(scan.skipped_files), files_skipped_first=list(scan.skipped_files[:SKIPPED_SHOWN]),
        read=plan.read, stored=len(plan.new), duplicate=plan.duplicates, quarantined=len(plan.quarantined),
        forgotten=plan.forgotten, superseded=plan.superseded, forks_declared=len(plan.forks),
        quarantined_by_reason=Counter(str(r.reason) for r in plan.quarantined),
        sessions_touched=len(written), table_rows=totals))
    report.sessions.update(written)
    report.check_scope = {"session_ids": written, "partition_label": window.label}
    if scan.skipped_files:
        report.warnings.append(describe_skipped(scan.skipped_files))
    report.preview = [{"session": m.session_id, "seq": m.seq, "user": m.user_id, "role": m.role,
                       "ts": m.ts.isoformat(), "content": m.content} for m in plan.new]
    report.extra_previews["quarantine_preview"] = [
        {k: v for k, v in asdict(r).items() if k in ("source_file", "source_line", "reason", "detail")}
        for r in plan.quarantined]
    return report

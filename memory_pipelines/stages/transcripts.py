"""Stage `transcripts`: every transcript record whose time falls in the window, from the
source `MEMORY_TRANSCRIPTS` names (memory_pipelines.sources), validated by DuckDB and
archived in `messages` with `sessions` kept in step, one day at a time; refused records go to
`quarantine` with their reason, and earlier refusals of what it now stores are marked
resolved (`refusals_resolved`). read = stored + duplicate + quarantined + forgotten +
superseded; a shard's run reads every record and ingests its users' (`other_shards`: the rest)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field

from psycopg_pool import ConnectionPool

from memory_pipelines.config import mask_url
from memory_pipelines.db import lifecycle as lifecycle_db
from memory_pipelines.db import transcripts as transcripts_db
from memory_pipelines.ingest import plan_ingest, scan_of_shard
from memory_pipelines.records import QuarantineReason
from memory_pipelines.stages.common import NO_BACKENDS, Backends, Counts, Slices, StageReport, Window
from memory_pipelines.sources import SourceSettings, open_source
from memory_pipelines.sources.files import FileSource, PostgresIndex
from memory_pipelines.core.transcript_scan import SKIPPED_SHOWN, describe_skipped

ASSET = "transcripts"
PREVIEW_ROWS = 10  # what markdown_table shows


@dataclass(frozen=True)
class Settings:
    source: SourceSettings = field(default_factory=SourceSettings)


@dataclass
class TranscriptCounts(Counts):
    partition_window: str = ""
    source: str = ""
    files_listed: int = 0  # files or objects the location holds (a table: 0)
    files_indexed: int = 0  # new or changed since the last run: scanned to learn their days
    file_reads: int = 0  # files read for the window's days: one holding several of them, once for each
    files_gone: int = 0  # indexed before, gone now (their messages stay archived)
    files_unreadable: int = 0  # listed, not readable: quarantined, tried again next run
    files_skipped: int = 0
    files_skipped_first: list[str] = field(default_factory=list)
    read: int = 0
    stored: int = 0
    duplicate: int = 0
    quarantined: int = 0
    # earlier refusals whose records the archive now holds, or whose file now refuses none
    refusals_resolved: int = 0
    forgotten: int = 0
    superseded: int = 0  # re-sent turns a replace merge set aside
    other_shards: int = 0  # records of other shards' users, left to their runs (not in `read`)
    forks_declared: int = 0
    quarantined_by_reason: Counter = field(default_factory=Counter)
    # source events that are no turn (snapshots, notices, titles), by kind: not in `read`
    events_skipped: Counter = field(default_factory=Counter)
    sessions_touched: int = 0
    table_rows: dict[str, int] = field(default_factory=dict)  # the archive tables' sizes afterwards


def run(pool: ConnectionPool, window: Window, settings: Settings,
        backends: Backends = NO_BACKENDS) -> StageReport[TranscriptCounts]:
    span = window.span
    # records no readable time dates go to the run's own range (there are any only when
    # nothing in the location has a readable time)
    source = open_source(settings.source, PostgresIndex(pool))
    plan = source.plan(span, include_undated=True)
    location = mask_url(settings.source.location)
    counts = TranscriptCounts(
        partition_window=f"{span.start.isoformat()} .. {span.end.isoformat()}", source=location,
        files_listed=plan.listed, files_indexed=len(plan.indexed), files_gone=len(plan.gone),
        files_skipped=len(plan.skipped),
        files_skipped_first=list(plan.skipped[:SKIPPED_SHOWN]))
    report = StageReport(counts)
    written: set[str] = set()
    unreadable = set(plan.unreadable)
    read_files: set[str] = set()  # files the run read records of, and of them those it refused some of
    refusing_files: set[str] = set()
    with pool.connection() as conn:
        # one day at a time, days committed in slices: memory follows the day, not the
        # location, and a run stopped on a later day keeps the days it finished (all but the
        # last moment's)
        with Slices(conn) as slices:
            for day in plan.windows:
                for scan in plan.read(day):
                    counts.file_reads += scan.files
                    counts.events_skipped.update(dict(scan.skipped_events))
                    # a file may also fail between indexing and reading its day
                    unreadable |= {r.source_file for r in scan.quarantined
                                   if r.reason == QuarantineReason.UNREADABLE_FILE}
                    read_files |= {m.source_file for m in scan.messages} | {r.source_file for r in scan.quarantined}
                    refusing_files |= {r.source_file for r in scan.quarantined}
                    with slices.item() as first:
                        if first:
                            transcripts_db.lock_transcript_writes(conn)
                        mine, elsewhere = scan_of_shard(scan, window.shard)
                        counts.other_shards += elsewhere
                        written |= _ingest(conn, mine, window.label, window.run_id, counts, report)
        if isinstance(source, FileSource):
            # a file read now that refuses none of its records: its earlier refusals are over,
            # even those whose records no longer fall on the same line (merged, renumbered)
            with conn.transaction():
                transcripts_db.lock_transcript_writes(conn)
                counts.refusals_resolved += transcripts_db.resolve_clean_file_refusals(
                    conn, source.location, source.settings.key, sorted(read_files - refusing_files), window.run_id)
        counts.table_rows = transcripts_db.row_counts(conn, transcripts_db.ARCHIVE_TABLES)
    counts.sessions_touched = len(written)
    counts.files_unreadable = len(unreadable)
    report.sessions.update(written)
    report.check_scope = {"session_ids": sorted(written), "partition_label": window.label}
    if plan.skipped:
        report.warnings.append(describe_skipped(plan.skipped))
    if plan.gone:
        report.warnings.append(f"{len(plan.gone)} file(s) indexed before are gone from {location}: "
                               f"{', '.join(plan.gone[:SKIPPED_SHOWN])} (their archived messages stay)")
    if unreadable:
        shown = sorted(unreadable)[:SKIPPED_SHOWN]
        report.warnings.append(f"{len(unreadable)} file(s) could not be read, quarantined as unreadable_file "
                               f"and tried again next run: {', '.join(shown)}")
    return report


def _ingest(conn, scan, label: str, run_id: str, counts: TranscriptCounts, report: StageReport) -> set[str]:
    """One day's records checked against the archive and written; returns the sessions written."""
    session_ids = sorted({m.session_id for m in scan.messages})
    stored = transcripts_db.stored_messages(conn, sorted({(m.session_id, m.seq) for m in scan.messages}))
    parents = sorted({m.parent_session_id for m in scan.messages if m.parent_session_id is not None})
    owners = transcripts_db.session_owners(conn, sorted({*session_ids, *parents}))
    forks = transcripts_db.fork_points(conn, sorted({*session_ids, *parents}))
    forgotten = lifecycle_db.forgotten_for(conn, sorted({m.user_id for m in scan.messages}))
    plan = plan_ingest(scan, stored, owners, forgotten, forks, transcripts_db.superseded_keys(conn, session_ids))
    transcripts_db.insert_fork_points(conn, plan.forks, "transcript")
    transcripts_db.insert_messages(conn, plan.new, run_id)
    # before this day's refusals are written: a record refused again is open again
    counts.refusals_resolved += transcripts_db.resolve_held_refusals(conn, scan.messages, run_id)
    transcripts_db.insert_quarantine(conn, plan.quarantined, label, run_id)
    written = sorted({m.session_id for m in plan.new})
    transcripts_db.refresh_sessions(conn, written)
    counts.read += plan.read
    counts.stored += len(plan.new)
    counts.duplicate += plan.duplicates
    counts.quarantined += len(plan.quarantined)
    counts.forgotten += plan.forgotten
    counts.superseded += plan.superseded
    counts.forks_declared += len(plan.forks)
    counts.quarantined_by_reason.update(str(r.reason) for r in plan.quarantined)
    # a preview shows a few rows; a year's run must not keep every message for it
    room = PREVIEW_ROWS - len(report.preview)
    report.preview.extend({"session": m.session_id, "seq": m.seq, "user": m.user_id, "role": m.role,
                           "ts": m.ts.isoformat(), "content": m.content} for m in plan.new[:max(room, 0)])
    shown = report.extra_previews.setdefault("quarantine_preview", [])
    shown.extend({k: v for k, v in asdict(r).items() if k in ("source_file", "source_line", "reason", "detail")}
                 for r in plan.quarantined[:max(PREVIEW_ROWS - len(shown), 0)])
    return set(written)

"""`run`, `reshard` and `generate`: distill transcripts into memory, change the shard count, write
synthetic transcripts."""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from itertools import islice
from pathlib import Path

from memory_pipelines.cli.common import (CliError, UsageError, _connect_url, _parse_day, _positive_int,
                                         _say_default_embedder)
from memory_pipelines.config import Settings
from memory_pipelines.interrupts import Interrupted
from memory_pipelines.records import TRANSCRIPT_FORMATS


def _probe_model_servers(settings: Settings) -> None:
    """Fail in seconds, before anything is written, when a configured model server is down."""
    from memory_pipelines.embed import embed_config
    from memory_pipelines.llm.config import chat_config, decision_config
    from memory_pipelines.llm.probe import ModelServerUnreachable, model_server, probe

    chat, decision, embed = chat_config(settings), decision_config(settings), embed_config(settings)
    try:
        probe([model_server(chat.backend, chat.base_url, "MEMORY_LLM", "rules"),
               model_server(decision.backend, decision.base_url, "MEMORY_DECISION", "rules"),
               model_server(embed.backend, embed.base_url, "MEMORY_EMBED", "hashing")])
    except ModelServerUnreachable as exc:
        raise CliError(str(exc)) from None


def _refused_summary(reasons: dict[str, int]) -> str:
    return ", ".join(f"{count} {reason}" for reason, count in sorted(reasons.items()))


UNDATED_BATCH = 1000  # undated records quarantined per insert


LATER_NAMED = 3  # of the records dated after today, those named by file and line


def _records_after(source, day: date) -> list:
    """The records dated after `day` (UTC), in the location's order."""
    from memory_pipelines.records import TimeWindow

    start = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    plan = source.plan(TimeWindow(start, start.replace(year=start.year + 100)))
    return [m for window in plan.windows for scan in plan.read(window) for m in scan.messages]


def _describe_later(records) -> str:
    named = ", ".join(f"{r.source_file}:{r.source_line} ({r.ts.date()})" for r in records[:LATER_NAMED])
    more = f" and {len(records) - LATER_NAMED} more" if len(records) > LATER_NAMED else ""
    return f"{len(records)} record(s) dated after today: {named}{more}"


def _quarantine_undated(source, url: str) -> tuple[str, str | None]:
    """Records no readable time dates, when nothing in the location has one: quarantined
    under the label `undated` (no partition is opened for them). Returns their reasons, and
    the first one's detail (a format no reader recognised says so there)."""
    from memory_pipelines.db import transcripts as transcripts_db
    from memory_pipelines.db.connection import get_pool

    reasons: Counter = Counter()
    first = None
    records = source.undated_records()
    with get_pool(url).connection() as conn, conn.transaction():
        # in batches: a large location of undated records is never held whole
        while batch := list(islice(records, UNDATED_BATCH)):
            transcripts_db.insert_quarantine(conn, batch, "undated", "cli")
            reasons.update(str(r.reason) for r in batch)
            first = first or next((f"{r.source_file}:{r.source_line}: {r.detail}" for r in batch), None)
    return _refused_summary(reasons), first


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.config import mask_url
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.sources import SourceSettings, open_source
    from memory_pipelines.sources.base import TranscriptSourceError
    from memory_pipelines.sources.files import PostgresIndex
    from memory_pipelines.core.transcript_scan import describe_skipped

    if args.transcripts:
        location = args.transcripts
        if "://" not in location:
            path = Path(location).expanduser().resolve()
            if not path.exists():
                raise UsageError(f"transcript path does not exist: {path}")
            location = str(path)
        settings = replace(settings, transcripts=location)
    if args.format:
        settings = replace(settings, transcript_format=args.format)
    start, end = _parse_day(args.start, "--start"), _parse_day(args.end, "--end")
    shown = mask_url(settings.transcripts)
    url = _connect_url(settings)
    pool = get_pool(url)  # migrates before any run starts
    source = open_source(SourceSettings.from_settings(settings), PostgresIndex(pool))
    try:
        found = source.inventory()
    except TranscriptSourceError as exc:
        raise UsageError(str(exc)) from None
    print(f"transcripts: {shown}")
    if found.skipped:
        print(f"skipped:     {describe_skipped(found.skipped)}")
    if found.records == 0:
        raise CliError(f"no transcript records under {shown}")
    if found.first_day is None and (start is None or end is None):
        reasons, first = _quarantine_undated(source, url)
        raise CliError(f"all {found.records} record(s) under {shown} were refused ({reasons}) and "
                       "quarantined under 'undated': none was read with a time, so no day was run"
                       + (f"; the first: {first}" if first else ""))
    from assets.location import use_settings
    from assets.partition_start import follow_run

    # a source the database has not indexed (a postgresql:// table) may start earlier
    settings = follow_run(settings, found.first_day)
    use_settings(settings)  # before the assets are defined
    from assets.run.runner import (RunFailed, RunInterrupted, ensure_dagster_home, last_partition_day,
                               partition_keys_between, run_shards)

    today = last_partition_day()
    if end is None and found.last_day is not None and found.last_day > today:
        # a clock ahead of UTC: those records wait for a run of their day, the rest run now
        later = _records_after(source, today)
        if found.first_day > today:
            raise CliError(f"every record under {shown} is dated after today ({today}, UTC), the last day there "
                           f"is a partition for: {_describe_later(later)}; set their times right, or run once "
                           "their day has come")
        print(f"later:       {_describe_later(later)}: they wait for a run of their day (a clock ahead of UTC? "
              f"set their times right); this run ends today, --end {today}")
        end = today
    start, end = start or found.first_day, end or found.last_day
    if end < start:
        raise UsageError(f"--end {end} is before --start {start}")
    _probe_model_servers(settings)

    from memory_pipelines.db import schema as schema_db
    from memory_pipelines.db import transcripts as transcripts_db
    from memory_pipelines.shards import ShardLayoutMismatch

    shards = _parse_shards(args.shards, settings.shards)
    ensure_dagster_home(settings.home, url, max_concurrent_runs=settings.max_concurrent_runs)
    try:
        keys = partition_keys_between(start.isoformat(), end.isoformat())
        with pool.connection() as conn:  # before any run: every step would refuse it alike
            schema_db.check_shard_layout(conn, settings.shards)
    except (ValueError, ShardLayoutMismatch) as exc:
        raise UsageError(str(exc)) from None
    print(f"partitions:  {keys[0]} .. {keys[-1]} ({len(keys)} days)")
    _say_default_embedder(settings, "embedder:    ", sys.stdout)
    started = time.perf_counter()
    try:
        runs = run_shards(keys, settings, shards, args.parallel)
    except RunFailed as exc:
        raise CliError(str(exc)) from None
    except RunInterrupted as exc:
        raise Interrupted(exc.signum) from exc
    with pool.connection() as conn:
        counts = transcripts_db.row_counts(conn, schema_db.list_tables(conn))
        refusals_open, refusals_resolved = transcripts_db.quarantine_totals(conn)
    width = max(len(t) for t in counts)
    runs_label = f" x {len(runs)} shard(s)" if settings.shards > 1 else ""
    print(f"done: {len(keys)} partition(s){runs_label} in {time.perf_counter() - started:.1f}s")
    for table, count in counts.items():
        print(f"  {table:<{width}}  {count:>8}")
    skipped_events = sum((r.events_skipped for r in runs), Counter())
    if skipped_events:
        kinds = ", ".join(f"{kind} {n}" for kind, n in skipped_events.most_common())
        print(f"skipped: {skipped_events.total()} source event(s) that are no turn ({kinds})")
    resolved_now = sum(r.refusals_resolved for r in runs)
    if refusals_open or refusals_resolved:
        print(f"quarantine: {refusals_open} refusal(s) open, {refusals_resolved} resolved ({resolved_now} by this "
              "run): `memory-pipelines quarantine` lists the open ones")
    read, quarantined = sum(r.read for r in runs), sum(r.quarantined for r in runs)
    if read and quarantined == read:
        refused = sum((r.refused_by_reason for r in runs), Counter())
        raise CliError(f"all {read} record(s) read were refused and quarantined "
                       f"({_refused_summary(refused)}): see the quarantine table; nothing was stored")
    return 0


def _parse_shards(text: str | None, count: int) -> list[int]:
    """`--shards`: all (the default) or shard numbers, e.g. 0,2."""
    if text is None or text == "all":
        return list(range(count))
    try:
        shards = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise UsageError(f"--shards {text!r}: give all or shard numbers such as 0,2") from None
    outside = [s for s in shards if not 0 <= s < count]
    if outside:
        raise UsageError(f"--shards {text}: MEMORY_SHARDS is {count}, so shards are 0..{count - 1}")
    return shards


def cmd_reshard(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.db import schema as schema_db
    from memory_pipelines.db.connection import get_pool

    from assets.run.runner import ensure_dagster_home, runs_in_progress

    url = _connect_url(settings)
    ensure_dagster_home(settings.home, url, max_concurrent_runs=settings.max_concurrent_runs)
    # a run that started under the old count would leave some users' days undone
    busy = runs_in_progress()
    if busy and not args.force:
        raise CliError(f"{len(busy)} distill run(s) are queued or running ({', '.join(busy[:3])}): wait for them "
                       "(or cancel them in the UI) and run reshard again; --force when their processes are gone")
    if busy:
        print(f"--force: {len(busy)} run(s) shown as in progress ({', '.join(busy[:3])}) taken for dead")
    with get_pool(url).connection() as conn:
        before = schema_db.change_shard_layout(conn, args.shards)
    print(f"shards: {before if before is not None else 'none recorded'} -> {args.shards}")
    if args.shards != settings.shards:
        print(f"set MEMORY_SHARDS={args.shards} for every process of the deployment (runs refuse another count)")
    print("then run again the days from the first one a shard had not finished, e.g. "
          "`memory-pipelines run --start DAY --shards all`: stages are idempotent, finished days stay as they are")
    return 0


def cmd_generate(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.generator import GeneratorConfig, write_transcripts

    config = GeneratorConfig(
        users=args.users, sessions=args.sessions, seed=args.seed, start=_parse_day(args.start, "--start"),
        days=args.days,
    )
    stats = write_transcripts(Path(args.out), config)
    print(f"wrote {stats.messages} messages in {stats.sessions} sessions for {stats.users} users "
          f"over {stats.days} days to {args.out} ({stats.files} files)")
    return 0


def register_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="materialize the whole asset graph for every partition in range")
    run.add_argument("--transcripts", help="a transcript file or folder, s3://bucket/prefix, or "
                     "postgresql://…?table=NAME (default: MEMORY_TRANSCRIPTS or the sample)")
    run.add_argument("--format", choices=("auto", *TRANSCRIPT_FORMATS),
                     help="how transcript files are read (default: MEMORY_TRANSCRIPT_FORMAT, auto: per file)")
    run.add_argument("--start", help="first day, YYYY-MM-DD (default: the first day in the transcripts)")
    run.add_argument("--end", help="last day, inclusive (default: the last day in the transcripts)")
    run.add_argument("--shards", help="with MEMORY_SHARDS above 1: all (default) or the shards to run, e.g. 0,2; "
                     "each shard's days are one run")
    run.add_argument("--parallel", type=_positive_int, default=1, metavar="K",
                     help="shard runs at once, each in its own process (default 1)")
    run.set_defaults(func=cmd_run)


def register_reshard(sub: argparse._SubParsersAction) -> None:
    reshard = sub.add_parser("reshard", help="record a new MEMORY_SHARDS for the database (no run may be in progress)")
    reshard.add_argument("--shards", type=_positive_int, required=True, help="the new shard count")
    reshard.add_argument("--force", action="store_true",
                         help="go on although runs show as in progress (their processes were killed)")
    reshard.set_defaults(func=cmd_reshard)


def register_generate(sub: argparse._SubParsersAction) -> None:
    gen = sub.add_parser("generate", help="write deterministic synthetic transcripts (for benchmarks)")
    gen.add_argument("out", help="output folder")
    gen.add_argument("--users", type=int, default=10)
    gen.add_argument("--sessions", type=int, default=100, help="sessions in all")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--days", type=int, default=14)
    gen.add_argument("--start", default="2026-10-01", help="first day, YYYY-MM-DD")
    gen.set_defaults(func=cmd_generate)

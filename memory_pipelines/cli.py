"""`memory-pipelines`: run the pipeline, manage the embedded database, open the UI."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from itertools import islice
from pathlib import Path

from memory_pipelines.config import ConfigError, Settings, validate_environment
from memory_pipelines.interrupts import STOP_SIGNALS, Interrupted, raise_on_stop_signals
from memory_pipelines.records import ARCHIVE_REASONS, DEFAULT_BUDGET_CHARS, MERGE_MODES, SEARCH_SCOPES, TRANSCRIPT_FORMATS


class CliError(RuntimeError):
    """Ends the command with a one-line reason and exit status 1."""


class UsageError(CliError):
    """Ends the command with a one-line reason and exit status 2: the user asked for
    something that cannot be done as asked (a bad setting, a file that is no transcript)."""


def _settings() -> Settings:
    return Settings.from_env()


def _connect_url(settings: Settings) -> str:
    from memory_pipelines.db.connection import resolve_url

    return resolve_url(settings.database_url, settings.home)


def _parse_day(text: str | None, flag: str) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{flag} must be a date like 2026-10-01, got {text!r}") from None


def _probe_model_servers() -> None:
    """Fail in seconds, before anything is written, when a configured model server is down."""
    from memory_pipelines.embed import embed_config
    from memory_pipelines.llm.config import chat_config, decision_config
    from memory_pipelines.llm.probe import ModelServerUnreachable, model_server, probe

    chat, decision, embed = chat_config(), decision_config(), embed_config()
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
    from memory_pipelines.db import repository
    from memory_pipelines.db.connection import get_pool

    reasons: Counter = Counter()
    first = None
    records = source.undated_records()
    with get_pool(url).connection() as conn, conn.transaction():
        # in batches: a large location of undated records is never held whole
        while batch := list(islice(records, UNDATED_BATCH)):
            repository.insert_quarantine(conn, batch, "undated", "cli")
            reasons.update(str(r.reason) for r in batch)
            first = first or next((f"{r.source_file}:{r.source_line}: {r.detail}" for r in batch), None)
    return _refused_summary(reasons), first


def cmd_run(args: argparse.Namespace) -> int:
    from memory_pipelines.config import mask_url
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.sources import SourceSettings, open_source
    from memory_pipelines.sources.base import TranscriptSourceError
    from memory_pipelines.sources.files import PostgresIndex
    from memory_pipelines.transcripts import describe_skipped

    if args.transcripts:
        location = args.transcripts
        if "://" not in location:
            path = Path(location).expanduser().resolve()
            if not path.exists():
                raise UsageError(f"transcript path does not exist: {path}")
            location = str(path)
        os.environ["MEMORY_TRANSCRIPTS"] = location
    if args.format:
        os.environ["MEMORY_TRANSCRIPT_FORMAT"] = args.format
    settings = _settings()
    start, end = _parse_day(args.start, "--start"), _parse_day(args.end, "--end")
    shown = mask_url(settings.transcripts)
    url = _connect_url(settings)
    pool = get_pool(url)  # migrates before any run starts
    source = open_source(SourceSettings.from_env(), PostgresIndex(pool))
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
    from assets.runner import (RunFailed, RunInterrupted, ensure_dagster_home, last_partition_day,
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
    _probe_model_servers()

    from memory_pipelines.db import repository
    from memory_pipelines.shards import ShardLayoutMismatch

    shards = _parse_shards(args.shards, settings.shards)
    ensure_dagster_home(settings.home, url)
    try:
        keys = partition_keys_between(start.isoformat(), end.isoformat())
        with pool.connection() as conn:  # before any run: every step would refuse it alike
            repository.check_shard_layout(conn, settings.shards)
    except (ValueError, ShardLayoutMismatch) as exc:
        raise UsageError(str(exc)) from None
    print(f"partitions:  {keys[0]} .. {keys[-1]} ({len(keys)} days)")
    _say_default_embedder("embedder:    ", sys.stdout)
    started = time.perf_counter()
    try:
        runs = run_shards(keys, shards, args.parallel)
    except RunFailed as exc:
        raise CliError(str(exc)) from None
    except RunInterrupted as exc:
        raise Interrupted(exc.signum) from exc
    with pool.connection() as conn:
        counts = repository.row_counts(conn, repository.list_tables(conn))
        refusals_open, refusals_resolved = repository.quarantine_totals(conn)
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


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


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


def cmd_db(args: argparse.Namespace) -> int:
    from memory_pipelines.db import embedded
    from memory_pipelines.db.migrations import has_extension, migrate

    settings = _settings()
    external = settings.database_url is not None
    if args.action == "url":
        print(_connect_url(settings))
    elif args.action == "start":
        if external:
            print("MEMORY_DATABASE_URL is set: nothing to start")
        else:
            url = embedded.start(settings.home)
            migrate(url)
            print(f"running: {url}")
    elif args.action == "stop":
        if external:
            print("MEMORY_DATABASE_URL is set: nothing to stop")
        else:
            print("stopped" if embedded.stop(settings.home) else "not running")
    elif args.action == "migrate":
        url = _connect_url(settings)
        applied = migrate(url)
        print(f"applied {len(applied)} migration(s)" + "".join(f"\n  {m.version:04d}_{m.name}" for m in applied))
    elif args.action == "status":
        import psycopg

        if external:
            url = settings.database_url
            print("database: external (MEMORY_DATABASE_URL)")
        else:
            state = embedded.status(settings.home)
            print(f"database: embedded, data in {state.pgdata}")
            print(f"server:   {'running, pid ' + str(state.pid) if state.running else 'stopped'}")
            if not state.running:
                return 0
            url = state.url
        try:
            with psycopg.connect(url, connect_timeout=5) as conn:
                version = conn.execute("SHOW server_version").fetchone()[0]
                print(f"postgres: {version}")
                for ext in ("vector", "pg_trgm"):
                    print(f"{ext + ':':<9} {'installed' if has_extension(conn, ext) else 'missing'}")
        except psycopg.Error as exc:
            raise CliError(f"cannot connect: {str(exc).strip().splitlines()[0]}") from None
    return 0


def _workspace_args() -> list[str]:
    for folder in (Path.cwd(), Path(__file__).resolve().parent.parent):
        if (folder / "workspace.yaml").exists() and (folder / "assets" / "definitions.py").exists():
            return ["-w", str(folder / "workspace.yaml")]
    return ["-m", "assets.definitions"]


def cmd_ui(args: argparse.Namespace) -> int:
    from assets.runner import ensure_dagster_home

    settings = _settings()
    # start the embedded server before Dagster's processes join it: its runs and events live there
    ensure_dagster_home(settings.home, _connect_url(settings))
    command = [sys.executable, "-m", "dagster", "dev", *_workspace_args(), "-h", args.host, "-p", str(args.port)]
    # A shell that started us in the background leaves SIGINT ignored, and dagster dev maps
    # SIGTERM to SIGINT: restore the default in the child so both stop it.
    child = subprocess.Popen(command, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    stopped_by = []

    def forward(signum, _frame):
        stopped_by.append(signum)
        child.send_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        status = child.wait()
    finally:
        if child.poll() is None:
            child.kill()
    if stopped_by:
        raise Interrupted(stopped_by[0])
    return status


def cmd_reshard(args: argparse.Namespace) -> int:
    from memory_pipelines.db import repository
    from memory_pipelines.db.connection import get_pool

    from assets.runner import ensure_dagster_home, runs_in_progress

    settings = _settings()
    url = _connect_url(settings)
    ensure_dagster_home(settings.home, url)
    # a run that started under the old count would leave some users' days undone
    busy = runs_in_progress()
    if busy and not args.force:
        raise CliError(f"{len(busy)} distill run(s) are queued or running ({', '.join(busy[:3])}): wait for them "
                       "(or cancel them in the UI) and run reshard again; --force when their processes are gone")
    if busy:
        print(f"--force: {len(busy)} run(s) shown as in progress ({', '.join(busy[:3])}) taken for dead")
    with get_pool(url).connection() as conn:
        before = repository.change_shard_layout(conn, args.shards)
    print(f"shards: {before if before is not None else 'none recorded'} -> {args.shards}")
    if args.shards != settings.shards:
        print(f"set MEMORY_SHARDS={args.shards} for every process of the deployment (runs refuse another count)")
    print("then run again the days from the first one a shard had not finished, e.g. "
          "`memory-pipelines run --start DAY --shards all`: stages are idempotent, finished days stay as they are")
    return 0


def _require_user(conn, user_id: str) -> None:
    from memory_pipelines.db.queries import query

    if not conn.execute(query("user_known"), {"user_id": user_id}).fetchone()[0]:
        raise CliError(f"nothing is stored for user {user_id!r} (`memory-pipelines users` lists who has memory)")


def _require_session(conn, session_id: str, user_id: str | None = None) -> None:
    from memory_pipelines.db.queries import query

    owner = conn.execute(query("session_owner"), {"session_id": session_id}).fetchone()
    if owner is None:
        raise CliError(f"no session {session_id!r} is stored (`memory-pipelines sessions --user U` lists a user's)")
    if user_id is not None and owner[0] != user_id:
        raise CliError(f"session {session_id!r} belongs to another user than {user_id!r}")


def cmd_context(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.llm import build_backend
    from memory_pipelines.llm.config import decision_config
    from memory_pipelines.session_context import context_for

    pool = get_pool(_connect_url(_settings()))
    with pool.connection() as conn:
        _require_session(conn, args.session)
    decision = None if args.all else build_backend(decision_config())
    try:
        with pool.connection() as conn:
            context = context_for(conn, args.session, args.request, limit=args.limit, decision=decision,
                                  include_forks=args.include_forks)
    finally:
        if decision is not None:
            decision.close()
    if args.json:
        print(json.dumps(context.to_json(args.request or ""), ensure_ascii=False, indent=2))
        return 0
    print(f"# context for {context.session_id} ({len(context.messages)} messages, summary: {context.relevance})")
    for message in context.chat_messages(args.request or ""):
        print(f"\n[{message['role']}]\n{message['content']}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.embed import build_embedder, embed_config
    from memory_pipelines.search import UnifiedMemorySearch, format_served

    if args.user is None and not args.admin:
        raise UsageError("--user is required (searching every user needs --admin)")
    if args.mode == "forest" and args.user is None:
        raise UsageError("--mode forest descends one user's trees: name --user")
    pool = get_pool(_connect_url(_settings()))
    with pool.connection() as conn:
        if args.user is not None:
            _require_user(conn, args.user)
        if args.session is not None:
            _require_session(conn, args.session, args.user)
    embedder = build_embedder(embed_config())
    try:
        with pool.connection() as conn:
            search = UnifiedMemorySearch(conn, embedder, admin=args.admin)
            served = search.serve(args.query, scope=args.scope, k=args.k, user_id=args.user,
                                  session_id=args.session, current_session_id=args.session,
                                  budget_chars=args.budget or None, budget_tokens=args.budget_tokens,
                                  now=_parse_moment(args.now, "--now"), mode=args.mode,
                                  include_forks=args.include_forks)
    finally:
        embedder.close()
    for warning in search.warnings:
        print(f"memory-pipelines: warning: {warning.message}", file=sys.stderr)
    if args.json:
        print(json.dumps(served.to_json(args.query, args.scope), ensure_ascii=False, indent=2))
    else:
        print(format_served(args.query, args.scope, served))
    return 0


def cmd_bench_distill(args: argparse.Namespace) -> int:
    if args.shards is not None:  # read when the assets' partitions are defined, on import
        os.environ["MEMORY_SHARDS"] = str(args.shards)
    from assets.benchmarks import run_distill_benchmark
    from memory_pipelines import bench
    from memory_pipelines.generator import GeneratorConfig
    from memory_pipelines.llm.pricing import bench_price_table, load_price_table

    try:
        config = GeneratorConfig(users=args.users, sessions=args.sessions, seed=args.seed, days=args.days)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    prices = None
    if args.kind == "cost":
        try:
            prices = load_price_table(args.price_table or bench_price_table())
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    result = run_distill_benchmark(config, cost=args.kind == "cost", echo=lambda line: print(line, file=sys.stderr),
                                   executor=args.executor)
    print(json.dumps(result.to_json(prices), indent=2) if args.json else bench.distill_markdown(result, prices))
    return 0


def cmd_bench_ingest(args: argparse.Namespace) -> int:
    from assets.bench_ingest import ingest_markdown, run_ingest_benchmark
    from memory_pipelines.generator import DayFilesConfig

    try:
        config = DayFilesConfig(messages=args.messages, days=args.days, seed=args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    result = run_ingest_benchmark(config, s3=not args.no_s3, echo=lambda line: print(line, file=sys.stderr))
    print(json.dumps(result.to_json(), indent=2) if args.json else ingest_markdown(result))
    return 0


def cmd_bench_models(args: argparse.Namespace) -> int:
    from memory_pipelines import bench_models
    from memory_pipelines.llm import ModelConfig, build_backend
    from memory_pipelines.llm.probe import ModelServerUnreachable, model_server, probe

    if args.sessions < 1:
        raise UsageError(f"--sessions must be at least 1, got {args.sessions}")
    try:
        config = ModelConfig(backend=args.backend, base_url=args.base_url.rstrip("/"), model=args.model,
                             timeout_s=args.timeout, retries=1, backoff_s=1.0)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    try:
        probe([model_server(config.backend, config.base_url, "MEMORY_LLM", "rules")])
    except ModelServerUnreachable as exc:
        raise CliError(f"model server {config.base_url} unreachable ({exc.cause}): start it or fix --base-url") from None
    backend = build_backend(config)
    sessions = bench_models.sample_sessions(args.sessions)
    outcomes = []
    try:
        for number, messages in enumerate(sessions, start=1):
            print(f"session {number}/{len(sessions)}: {messages[0].session_id} ({len(messages)} messages)",
                  file=sys.stderr, flush=True)
            outcomes += bench_models.run_session(backend, messages)
    finally:
        backend.close()
    rows = bench_models.figures(outcomes)
    if args.json:
        print(json.dumps({"model": args.model, "base_url": config.base_url, "sessions": len(sessions),
                          "target_valid_rate": bench_models.VALID_TARGET,
                          "purposes": [r.to_json() for r in rows]}, indent=2))
    else:
        print(bench_models.markdown(rows, f"{args.backend}/{args.model}", len(sessions)))
    return 0


def cmd_bench_backfill(args: argparse.Namespace) -> int:
    from assets.benchmarks import run_backfill_benchmark
    from memory_pipelines import bench

    if not 1 <= args.short_days < args.long_days:
        raise UsageError(f"--short-days {args.short_days} must be at least 1 and below --long-days {args.long_days}")
    try:
        result = run_backfill_benchmark(args.users, args.sessions, args.seed, args.short_days, args.long_days,
                                        echo=lambda line: print(line, file=sys.stderr, flush=True))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(json.dumps(result.to_json(), indent=2) if args.json else bench.backfill_markdown(result))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from memory_pipelines import bench
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.embed import build_embedder, embed_config

    embedder = build_embedder(embed_config())
    try:
        if args.needles:
            pool = get_pool(_connect_url(_settings()))
            with pool.connection() as conn:
                scores = bench.retrieval(conn, embedder, k=args.k)
            if not any(s.questions for s in scores):
                raise CliError("no labelled question has a relevant chunk: run `memory-pipelines run` on the sample "
                               "first")
            if args.json:
                print(json.dumps({"embedder": embedder.model_id, "k": args.k, "modes": [asdict(s) for s in scores]},
                                 indent=2))
            else:
                print(bench.markdown(scores, args.k, embedder.model_id))
            return 0
        from assets.benchmarks import evidence_database
        from memory_pipelines.evidence_set import load_questions

        url, written = evidence_database(args.users, args.seed, embedder.model_id, rebuild=args.rebuild,
                                         echo=lambda line: print(line, file=sys.stderr, flush=True))
        questions = load_questions(written.questions)
        rows = (*bench.EVIDENCE_ROWS, *bench.VARIANT_ROWS) if args.variants else bench.EVIDENCE_ROWS
        with get_pool(url).connection() as conn:
            scores = bench.evidence_retrieval(conn, embedder, questions, rows=rows, k=args.k)
    finally:
        embedder.close()
    if args.json:
        print(json.dumps({"embedder": embedder.model_id, "k": args.k, "questions": len(questions),
                          "by_category": written.by_category, "rows": [asdict(s) for s in scores]}, indent=2))
    else:
        print(bench.evidence_markdown(scores, args.k, embedder.model_id, len(questions)))
    return 0


def cmd_bench_search(args: argparse.Namespace) -> int:
    from memory_pipelines.bench_search import report, timing
    from memory_pipelines.bench_search.build import SearchBenchConfig
    from memory_pipelines.embed import EmbedConfig, build_embedder, embed_config

    try:
        config = SearchBenchConfig(users=args.users, chunks=args.chunks, facts=args.facts, queries=args.queries,
                                   seed=args.seed, turns=args.turns)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    url = _connect_url(_settings())
    embedder = build_embedder(EmbedConfig() if args.embedder == "hashing" else embed_config())
    try:
        result = timing.run(url, config, embedder, rebuild=args.rebuild,
                            progress=lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        embedder.close()
    print(report.to_json(result) if args.json else report.markdown(result))
    return 0


def cmd_bench_serve(args: argparse.Namespace) -> int:
    from memory_pipelines import bench_serve

    try:
        config = bench_serve.ServeBenchConfig(clients=args.clients, seconds=args.seconds, workers=args.workers,
                                              transports=tuple(args.transport or bench_serve.TRANSPORTS),
                                              user=args.user, budget=args.budget)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    url = _serving_database()
    try:
        result = bench_serve.run(url, config, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except bench_serve.ServeBenchError as exc:
        raise CliError(str(exc)) from None
    print(bench_serve.to_json(result) if args.json else bench_serve.markdown(result))
    return 0


def _confirmed(args: argparse.Namespace, question: str) -> bool:
    """--yes, or a yes typed at a terminal; never silently on a pipe."""
    if args.yes:
        return True
    if args.dry_run or not sys.stdin.isatty():
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _print_removed(headline: str, removed: dict[str, int]) -> None:
    print(f"{headline}: {sum(removed.values())} rows")
    for table, count in removed.items():
        if count:
            print(f"  {table:<28} {count:>7}")


def cmd_forget(args: argparse.Namespace) -> int:
    import psycopg

    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lifecycle import forget, unforget

    pool = get_pool(_connect_url(_settings()))
    target = f"session {args.session} of user {args.user}" if args.session else f"user {args.user}"
    with pool.connection() as conn:
        if args.undo:
            with conn.transaction():
                lifted = unforget(conn, args.user, args.session)
            print("tombstone lifted: the transcripts can be ingested again" if lifted else "nothing was forgotten")
            return 0
        _require_user(conn, args.user)
        if args.session:
            _require_session(conn, args.session, args.user)
        # the same statements either way: counted, then kept or rolled back
        with conn.transaction():
            removed = forget(conn, args.user, args.session)
            if not args.yes:
                _print_removed(f"would forget {target}", removed)
            confirmed = _confirmed(args, f"Delete these {sum(removed.values())} rows for good?")
            if not confirmed:
                raise psycopg.Rollback()
    if confirmed:
        _print_removed(f"forgot {target}", removed)
        return 0
    if args.dry_run:
        print("dry run: nothing deleted")
        return 0
    raise UsageError("nothing deleted: pass --yes to delete, or --dry-run to only list what would go")


def cmd_export(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lifecycle import export_markdown

    pool = get_pool(_connect_url(_settings()))
    with pool.connection() as conn:
        written = export_markdown(conn, Path(args.dir), args.user)
    print(f"wrote {len(written)} file(s) to {Path(args.dir).resolve()}")
    return 0


def _parse_moment(text: str | None, flag: str):
    """A date or an ISO time; without a zone, UTC."""
    from datetime import UTC, datetime

    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{flag} must be a date or time like 2026-10-01 or 2026-10-01T12:00, got {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _archive_selection(args: argparse.Namespace):
    from memory_pipelines.lifecycle import ArchiveSelection

    return ArchiveSelection(reason=args.reason, since=_parse_moment(args.since, "--since"), run_id=args.run,
                            user_id=args.user, ids=tuple(getattr(args, "ids", None) or ()),
                            limit=getattr(args, "limit", None))


def _archived_line(row) -> str:
    score = "" if row.score is None else f" score {row.score:.3f}"
    return (f"  #{row.id:<6} {row.archived_at:%Y-%m-%d %H:%M} {row.reason:<14} {row.source_table} {row.source_id}"
            f" · {row.user_id or 'global'} · {row.label[:60]!r}{score} · run {row.run_id}")


def cmd_archive_list(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lifecycle import archived_rows

    with get_pool(_connect_url(_settings())).connection() as conn:
        rows = archived_rows(conn, _archive_selection(args))
    if args.json:
        print(json.dumps([asdict(r) for r in rows], default=str, ensure_ascii=False, indent=2))
        return 0
    print(f"{len(rows)} archived row(s)" + (f" (first {args.limit})" if args.limit and len(rows) == args.limit else ""))
    for row in rows:
        print(_archived_line(row))
    return 0


def cmd_archive_restore(args: argparse.Namespace) -> int:
    import psycopg

    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lifecycle import restore_selected

    selection = _archive_selection(args)
    if selection.empty:
        raise UsageError("say what to restore: archive row ids, --run RUN, --reason R and/or --since T (or --user U)")
    with get_pool(_connect_url(_settings())).connection() as conn:
        with conn.transaction():
            results = restore_selected(conn, selection)
            if not args.yes:
                raise psycopg.Rollback()  # a dry run: the same restores, undone
    missing = sorted(set(selection.ids) - {r.row.id for r in results})
    restored = [r for r in results if r.conflict is None]
    print(f"{'restored' if args.yes else 'would restore'} {len(restored)} of {len(results)} archived row(s)")
    for result in results:
        extra = f" (with {len(result.restored) - 1} hidden fact row(s))" if len(result.restored) > 1 else ""
        print(_archived_line(result.row) + (f"  NOT RESTORED: {result.conflict}" if result.conflict else extra))
    for archive_id in missing:
        print(f"  #{archive_id}: no such archived row (a merged fact row comes back with its survivor)")
    if not args.yes:
        print("dry run: nothing restored; add --yes to restore these")
    if missing or len(restored) < len(results):
        return 1
    return 0


def _quarantine_line(row) -> str:
    record = f" · {row.session_id} seq {row.seq}" if row.seq is not None else (
        f" · {row.session_id}" if row.session_id else "")
    resolved = (f"  resolved {row.resolved_at:%Y-%m-%d %H:%M} by run {row.resolved_by_run}"
                if row.resolved_at is not None else "")
    return (f"  {row.source_file}:{row.source_line}  {row.reason}  {row.detail}{record}"
            f" · run {row.run_id} {row.quarantined_at:%Y-%m-%d %H:%M}{resolved}")


def cmd_quarantine(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from memory_pipelines.db import repository
    from memory_pipelines.db.connection import get_pool

    open_rows, resolved = not args.resolved, args.resolved or args.all
    with get_pool(_connect_url(_settings())).connection() as conn:
        rows = repository.quarantine_rows(conn, open_rows=open_rows, resolved=resolved, reason=args.reason,
                                          limit=args.limit)
        open_count, resolved_count = repository.quarantine_totals(conn, args.reason)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], default=str, ensure_ascii=False, indent=2))
        return 0
    shown = f" (first {args.limit})" if len(rows) == args.limit else ""
    of = f" {args.reason}" if args.reason else ""
    if args.resolved:
        print(f"{resolved_count}{of} refusal(s) resolved by a later run{shown}; {open_count} still open")
    else:
        where = "listed after them" if args.all else "--resolved lists them"
        print(f"{open_count}{of} refusal(s) open{shown}"
              + (f"; {resolved_count} resolved by a later run ({where})" if resolved_count else ""))
    for row in rows:
        print(_quarantine_line(row))
    return 0


def cmd_embeddings(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.db.queries import query
    from memory_pipelines.embed import EmbeddingError, build_embedder, embed_config

    embedder = build_embedder(embed_config())
    try:
        configured = embedder.model_id
    except EmbeddingError as exc:
        configured = f"{embedder.config.backend}:{embedder.config.model}:? ({exc})"
    finally:
        embedder.close()
    with get_pool(_connect_url(_settings())).connection() as conn:
        rows = conn.execute(query("embedding_model_counts")).fetchall()
    print(f"configured embedder: {configured}")
    for table, model, count in rows:
        if model is None:
            state = "not embedded yet: the next run embeds them"
        elif model == configured:
            state = "configured"
        else:
            state = "another model: the next run re-embeds them; search uses text until then"
        print(f"  {table:<18} {model or '-':<40} {count:>8}  {state}")
    if not rows:
        print("  nothing stored yet")
    return 0


def cmd_users(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.db.queries import query

    with get_pool(_connect_url(_settings())).connection() as conn:
        rows = conn.execute(query("stored_users")).fetchall()
    print(f"{len(rows)} user(s)")
    if rows:
        print(f"  {'user':<24} {'sessions':>8} {'messages':>9} {'facts':>6} {'entries':>7} {'chunks':>6} "
              f"{'archived':>8}  first .. last message")
    for user, sessions, messages, first, last, facts, entries, chunks, archived in rows:
        print(f"  {user:<24} {sessions:>8} {messages:>9} {facts:>6} {entries:>7} {chunks:>6} {archived:>8}  "
              f"{first:%Y-%m-%d} .. {last:%Y-%m-%d}")
    return 0


def cmd_sessions(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.db.queries import query

    with get_pool(_connect_url(_settings())).connection() as conn:
        _require_user(conn, args.user)
        rows = conn.execute(query("user_sessions"), {"user_id": args.user}).fetchall()
    forks = sum(r[8] is not None for r in rows)
    subagents = sum(r[10] is not None for r in rows)
    print(f"{len(rows)} session(s) of {args.user}" + (f", {forks} of them forks" if forks else "")
          + (f", {subagents} subagents' sessions" if subagents else "")
          + (" (under their parent)" if forks or subagents else ""))
    children: dict[str, list[tuple]] = {}
    for row in rows:
        children.setdefault(row[8] or row[10], []).append(row)

    def show(row: tuple, depth: int) -> None:
        session, agent, first, last, messages, chunks, version, extracted, fork_parent, fork_seq, launcher, at = row
        parent = fork_parent or launcher
        when = f"{first:%Y-%m-%d %H:%M} .. {last:%Y-%m-%d %H:%M}" if first else f"{'no turns of its own yet':<34}"
        how = (f"fork after turn {fork_seq}" if fork_parent else
               f"subagent launched at turn {at}" if at is not None else "subagent")
        name = f"└─ {session} ({how})" if parent else session
        state = "facts extracted" if extracted else "facts with a merge" if fork_parent else "not extracted yet"
        print(f"  {'   ' * max(depth - 1, 0)}{name:<{32 if not depth else 38}} {agent or '-':<10} {when}  "
              f"{messages:>5} messages  {chunks:>3} chunks  summary v{version or 0}  {state}")
        for child in children.get(session, []):
            show(child, depth + 1)

    known = {r[0] for r in rows}
    for row in rows:  # mainline sessions, and forks or subagents whose parent is another user's or gone
        parent = row[8] or row[10]
        if parent is None or parent not in known:
            show(row, 0 if parent is None else 1)
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.forks import ForkError, fork_session

    with get_pool(_connect_url(_settings())).connection() as conn:
        try:
            fork = fork_session(conn, args.session, args.as_, args.at, actor=args.by)
        except ForkError as exc:
            raise UsageError(str(exc)) from None
    print(f"forked {fork.parent_session_id} after turn {fork.fork_seq} as {fork.session_id} (user {fork.user_id}): "
          f"its own turns start at seq {fork.fork_seq + 1} in the transcripts")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.forks import ForkError, merge_fork, restore_merge
    from memory_pipelines.llm import build_backend
    from memory_pipelines.llm.config import chat_config

    pool = get_pool(_connect_url(_settings()))
    if args.restore:
        if args.dry_run:
            raise UsageError("--restore takes no --dry-run: it undoes the merge in force")
        with pool.connection() as conn:
            try:
                restored = restore_merge(conn, args.fork, args.into, actor=args.by)
            except ForkError as exc:
                raise UsageError(str(exc)) from None
        print(f"restored merge #{restored.merge.id} ({restored.merge.mode}) of {args.fork} into {args.into}: "
              f"{restored.removed} merged turn(s) removed, {restored.brought_back} set-aside turn(s) back")
        print(f"next: {restored.merge.next_step} (distils {args.into} again from that day)")
        return 0
    if args.mode is None:
        raise UsageError("merge needs --mode append|replace|summarize (or --restore)")
    writer = build_backend(chat_config()) if args.mode == "summarize" else None
    try:
        with pool.connection() as conn:
            report = merge_fork(conn, args.fork, args.into, args.mode, actor=args.by, dry_run=args.dry_run,
                                writer=writer)
    except ForkError as exc:
        raise UsageError(str(exc)) from None
    finally:
        if writer is not None:
            writer.close()
    merge = report.merge
    if report.already:
        print(f"already merged: #{merge.id} ({merge.mode}) by {merge.merged_by} at {merge.merged_at:%Y-%m-%d %H:%M}; "
              "nothing changed")
        return 0
    verb = "would merge" if report.dry_run else f"merged (#{merge.id})"
    aside = (f", {report.superseded} parent turn(s) {merge.superseded_first_seq}–{merge.superseded_last_seq} set aside"
             if report.superseded else "")
    print(f"{verb} {args.fork} turns {merge.fork_first_seq}–{merge.fork_last_seq} into {args.into} "
          f"({merge.mode}): parent turns {merge.parent_first_seq}–{merge.parent_last_seq}{aside}")
    for turn in report.written:
        text = " ".join(turn.content.split())
        print(f"  {turn.session_id}#{turn.seq} {turn.role}: {text[:100]}{'...' if len(text) > 100 else ''}")
    if not report.dry_run:
        print(f"next: {report.merge.next_step} (distils {args.into} again from that day)")
    return 0


def cmd_turns(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.search import get_turns_by_score

    if not 1 <= args.k <= 100:
        raise UsageError(f"--k must be between 1 and 100, not {args.k}")
    with get_pool(_connect_url(_settings())).connection() as conn:
        _require_user(conn, args.user)
        if args.session is not None:
            _require_session(conn, args.session, args.user)
        scores = get_turns_by_score(conn, args.user, args.session, args.k)
    if args.json:
        print(json.dumps(scores.to_json(), ensure_ascii=False, indent=2))
        return 0
    scope = f"session {args.session}" if args.session else f"user {args.user}"
    as_of = f"{scores.as_of:%Y-%m-%d %H:%M}" if scores.as_of else "never (nothing ingested)"
    print(f"{len(scores.turns)} of {scores.considered} turn(s) of {scope} by decay score, as of {as_of} "
          f"(base rate {scores.base_rate}/h)")
    for s in scores.turns:
        cited = ", ".join(sorted({c.kind for c in s.cited_by})) or "nothing"
        text = " ".join(s.turn.body.split())
        print(f"  {s.score:6.3f}  importance {s.importance:.2f} (cited by {cited}), {s.age_hours / 24:.1f} days old, "
              f"{s.turn.access_count} access(es)  {s.turn.session_id}#{s.turn.seq} {s.turn.role}: "
              f"{text[:100]}{'...' if len(text) > 100 else ''}")
    return 0


def _print_tree(title: str, nodes, depth: int | None) -> None:
    from memory_pipelines.rules.text import clip

    children: dict[str | None, list] = {}
    for node in nodes:
        children.setdefault(node.parent_key, []).append(node)
    print(title)

    def show(node, indent: int) -> None:
        spans = ", ".join(f"{s.session_id}#{s.seq_start}-{s.seq_end}" for s in node.spans[:3])
        more = f" +{len(node.spans) - 3} span(s)" if len(node.spans) > 3 else ""
        print(f"{'  ' * indent}- {node.node_key}  {node.started_at:%Y-%m-%d %H:%M} .. {node.ended_at:%Y-%m-%d %H:%M}"
              f"  {spans}{more}  keys: {', '.join(node.keys[:4]) or '-'}")
        print(f"{'  ' * indent}  {clip(node.summary, 160)}")
        if depth is None or indent < depth:  # the top is level 1
            for child in sorted(children.get(node.node_key, []), key=lambda c: c.position):
                show(child, indent + 1)

    for top in sorted(children.get(None, []), key=lambda n: (n.started_at, n.position)):
        show(top, 1)


def cmd_tree_show(args: argparse.Namespace) -> int:
    from memory_pipelines.db import repository
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.db.queries import query

    from memory_pipelines.tree import entity_tree_key

    if args.depth is not None and args.depth < 1:
        raise UsageError(f"--depth must be at least 1, not {args.depth}")
    with get_pool(_connect_url(_settings())).connection() as conn:
        _require_user(conn, args.user)
        if args.entity is not None:
            nodes = repository.tree_nodes(conn, args.user, "entity", entity_tree_key(args.user, args.entity))
            if not nodes:
                known = [r[0] for r in conn.execute(query("user_entity_trees"), {"user_ids": [args.user]})]
                names = ", ".join(k.removeprefix(f"{args.user}:") for k in sorted(known)[:10]) or "none yet"
                raise CliError(f"no entity tree of {args.entity!r} for {args.user}: entities with a tree: {names}")
            leaves = sum(n.level == 0 for n in nodes)
            _print_tree(f"entity tree of {args.entity} ({args.user}): {leaves} item(s) (relations, entries, facts) "
                        "by day, month and year", nodes, args.depth)
            return 0
        if args.session is not None:
            _require_session(conn, args.session, args.user)
            sessions = [args.session]
            scene = None
        else:
            sessions = [r[0] for r in conn.execute(query("user_session_trees"), {"user_id": args.user})]
            scene = repository.tree_nodes(conn, args.user, "scene", args.user)
        trees = {s: repository.tree_nodes(conn, args.user, "session", s) for s in sessions}
    if not any(trees.values()) and not scene:
        raise CliError(f"no tree of {args.session or args.user!r} yet: its chunks are grown into trees by "
                       "`memory-pipelines run` (asset memory_tree) once a session has chunks")
    if scene:
        leaves = sum(n.level == 0 for n in scene)
        _print_tree(f"scene tree of {args.user}: {leaves} session(s) by day, week and month", scene, args.depth)
    for session_id, nodes in trees.items():
        if nodes:
            levels = max(n.level for n in nodes) + 1
            _print_tree(f"session tree of {session_id}: {sum(n.level == 0 for n in nodes)} chunk(s), "
                        f"{levels} level(s)", nodes, args.depth)
    return 0


def _derived_values() -> dict[str, object]:
    """What the settings that follow others resolve to: the model and embedder families."""
    from memory_pipelines.config import default_home
    from memory_pipelines.embed import embed_config
    from memory_pipelines.llm.config import FIELD_BY_SUFFIX, chat_config, decision_config

    values: dict[str, object] = {"MEMORY_HOME": default_home()}
    for prefix, model in (("MEMORY_LLM", chat_config()), ("MEMORY_DECISION", decision_config())):
        values.update({f"{prefix}_{suffix}": getattr(model, name) for suffix, name in FIELD_BY_SUFFIX.items()})
    embed = embed_config()
    values.update({f"MEMORY_EMBED_{suffix}": getattr(embed, name) for suffix, name in (
        ("BACKEND", "backend"), ("BASE_URL", "base_url"), ("MODEL", "model"), ("API_KEY", "api_key"),
        ("DIM", "dimension"), ("BATCH", "batch_size"))})
    return values


def cmd_doctor(args: argparse.Namespace) -> int:
    from memory_pipelines.doctor import FAIL, as_json, diagnose

    checks = diagnose(echo=None if args.json else lambda check: print(check.line(), flush=True))
    if args.json:
        print(json.dumps(as_json(checks), indent=2))
    return 1 if any(check.status == FAIL for check in checks) else 0


def cmd_config(args: argparse.Namespace) -> int:
    from memory_pipelines.config import SPECS, mask_url, raw_value, setting

    problems, values = [], {}
    for name in SPECS:
        try:
            values[name] = setting(name)
        except ConfigError as exc:
            problems.append(str(exc))
    derived = {} if problems else _derived_values()
    rows = []
    for name, spec in SPECS.items():
        if name not in values:
            rows.append((name, "(invalid)", "environment"))
            continue
        value, source = values[name], "environment" if raw_value(name) is not None else "default"
        if raw_value(name) is None and spec.derived and name in derived:
            value, source = derived[name], f"derived: {spec.derived}"
        if value is None or value == "":
            shown = "-"
        elif "://" in str(value):
            shown = mask_url(str(value))  # a postgresql:// transcript source names its password too
        elif spec.secret:
            shown = "***"
        else:
            shown = str(value)
        rows.append((name, shown, source))
    width = max(len(name) for name, _, _ in rows)
    for name, shown, source in rows:
        print(f"{name:<{width}}  {shown:<36}  {source}")
    if problems:
        raise ConfigError("\n".join(problems))
    return 0


def cmd_lineage(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lineage import lineage, render

    pool = get_pool(_connect_url(_settings()))
    with pool.connection() as conn:
        try:
            report = lineage(conn, args.kind, args.id)
        except (LookupError, ValueError) as exc:
            raise CliError(str(exc)) from None
    print(json.dumps(report, default=str, ensure_ascii=False, indent=2) if args.json else render(report))
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from memory_pipelines.generator import GeneratorConfig, write_transcripts

    config = GeneratorConfig(
        users=args.users, sessions=args.sessions, seed=args.seed, start=_parse_day(args.start, "--start"),
        days=args.days,
    )
    stats = write_transcripts(Path(args.out), config)
    print(f"wrote {stats.messages} messages in {stats.sessions} sessions for {stats.users} users "
          f"over {stats.days} days to {args.out} ({stats.files} files)")
    return 0


def cmd_formats(args: argparse.Namespace) -> int:
    """The format each transcript file would be read in, and what decided it: before a first run,
    or when a file is refused as canonical."""
    from memory_pipelines.config import setting
    from memory_pipelines.formats import detect
    from memory_pipelines.sources.base import TranscriptSourceError
    from memory_pipelines.sources.local import LocalStore

    forced = setting("MEMORY_TRANSCRIPT_FORMAT")
    found = []
    for path in map(Path, args.paths):
        store = LocalStore(path)
        try:
            listing = store.list_objects()
        except TranscriptSourceError as exc:
            raise CliError(str(exc)) from None
        for obj in listing.objects:
            detection = detect(obj.name, store.read(obj).data)
            found.append({"file": obj.name, "format": forced if forced != "auto" else detection.format,
                          "detected": detection.format, "saw": detection.saw})
        found.extend({"file": name, "format": None, "detected": None, "saw": "not a transcript file (skipped)"}
                     for name in listing.skipped)
    if args.json:
        print(json.dumps(found, ensure_ascii=False, indent=2))
        return 0
    for row in found:
        print(f"{row['file']}: {row['format'] or '-'} — {row['saw']}")
    if forced != "auto":
        print(f"MEMORY_TRANSCRIPT_FORMAT={forced}: every file is read as {forced}, whatever was detected")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    from memory_pipelines.api.keys import create_key, list_keys, revoke_key
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.db.queries import query

    pool = get_pool(_connect_url(_settings()))
    with pool.connection() as conn, conn.transaction():
        if args.action == "create":
            if args.admin == (args.user is not None):
                raise UsageError("name the key's user (--user U), or make an admin key (--admin): one of the two")
            if args.user is not None and not conn.execute(query("user_known"), {"user_id": args.user}).fetchone()[0]:
                print(f"memory-pipelines: warning: nothing is stored for user {args.user!r} yet; the key may write "
                      "their first memory", file=sys.stderr)
            key, secret = create_key(conn, args.user, admin=args.admin, name=args.name)
            print(f"created API key {key.id} for {'every user (admin)' if key.admin else 'user ' + key.user_id}; "
                  "it is shown once, here:", file=sys.stderr)
            print(secret)
            return 0
        if args.action == "revoke":
            try:
                key = revoke_key(conn, args.id)
            except LookupError as exc:
                raise CliError(f"{exc} (`memory-pipelines keys list` shows them)") from None
            print(f"revoked API key {key.id} ({key.prefix}…): requests with it now get 401")
            return 0
        keys = list_keys(conn)
    if args.json:
        print(json.dumps([vars(k) for k in keys], indent=2, default=str))
        return 0
    print(f"{'id':>4}  {'user':<14} {'name':<16} {'key':<13} {'created':<17} {'last used':<17} state")
    for k in keys:
        state = f"revoked {k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "live"
        used = f"{k.last_used_at:%Y-%m-%d %H:%M}" if k.last_used_at else "never"
        print(f"{k.id:>4}  {'(admin)' if k.admin else k.user_id:<14} {k.name or '':<16} {k.prefix + '…':<13} "
              f"{k.created_at:%Y-%m-%d %H:%M}  {used:<17} {state}")
    if not keys:
        print("no API keys: `memory-pipelines keys create --user U` makes one")
    return 0


def _serving_database() -> str:
    """Start (or find) the database and migrate it once, before any server process opens a
    pool; the processes then reach it by MEMORY_DATABASE_URL."""
    from memory_pipelines.db.migrations import migrate

    url = _connect_url(_settings())
    migrate(url)
    os.environ["MEMORY_DATABASE_URL"] = url
    return url


def _uvicorn_logging() -> dict:
    """uvicorn's own lines and the API's (one access line per request) on stderr, in every
    worker process; uvicorn's access log is off: it prints query strings, which hold what
    users ask."""
    handler = {"class": "logging.StreamHandler", "formatter": "plain", "stream": "ext://sys.stderr"}
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
            "handlers": {"stderr": handler},
            "loggers": {name: {"handlers": ["stderr"], "level": "INFO", "propagate": False}
                        for name in ("uvicorn", "memory_pipelines.api")}}


def _say_default_embedder(prefix: str, out) -> None:
    from memory_pipelines.embed import default_embedder_note

    if note := default_embedder_note():
        print(f"{prefix}{note}", file=out)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from memory_pipelines.config import ApiSettings

    _serving_database()
    _say_default_embedder("memory-pipelines: embedder ", sys.stderr)
    settings = ApiSettings.from_env()
    if args.protocol == "mcp" and not args.http:
        import anyio

        from memory_pipelines.api.mcp_server import build_server
        from memory_pipelines.api.service import MemoryService

        if not os.environ.get("MEMORY_API_KEY"):
            raise UsageError("MCP over stdio acts with the key in MEMORY_API_KEY: "
                             "`memory-pipelines keys create --user U` makes one")
        service = MemoryService.open()
        try:
            anyio.run(build_server(service, settings).run_stdio_async)
        finally:
            service.close()
        return 0
    if args.protocol == "mcp":
        from memory_pipelines.api.mcp_server import http_app
        from memory_pipelines.api.service import MemoryService

        if args.workers != 1:
            raise UsageError("--workers is for `serve http`; MCP over HTTP runs one process")
        service = MemoryService.open()
        app: object = http_app(service, args.host, settings)
        print(f"MCP over streamable HTTP at http://{args.host}:{args.port}/mcp", file=sys.stderr)
    else:
        app = "memory_pipelines.api.http:build_app"
        print(f"memory API at http://{args.host}:{args.port}/v1 (docs: /docs), {args.workers} worker(s)",
              file=sys.stderr)
    # uvicorn ends on SIGTERM or SIGINT gracefully (no new connections, requests in flight
    # finish), then raises the signal again, which uvicorn.run swallows: note it to say so
    stopped_by = []

    def note(signum, _frame):
        stopped_by.append(signum)
        raise Interrupted(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, note)
    uvicorn.run(app, factory=isinstance(app, str), host=args.host, port=args.port, workers=args.workers,
                access_log=False, log_config=_uvicorn_logging(), timeout_graceful_shutdown=int(settings.timeout) + 5)
    if stopped_by:
        raise Interrupted(stopped_by[0])
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memory-pipelines", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

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

    reshard = sub.add_parser("reshard", help="record a new MEMORY_SHARDS for the database (no run may be in progress)")
    reshard.add_argument("--shards", type=_positive_int, required=True, help="the new shard count")
    reshard.add_argument("--force", action="store_true",
                         help="go on although runs show as in progress (their processes were killed)")
    reshard.set_defaults(func=cmd_reshard)

    db = sub.add_parser("db", help="the database: status, start, stop, migrate, url")
    db.add_argument("action", choices=["status", "start", "stop", "migrate", "url"])
    db.set_defaults(func=cmd_db)

    ui = sub.add_parser("ui", help="the Dagster UI on workspace.yaml")
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=3000)
    ui.set_defaults(func=cmd_ui)

    ctx = sub.add_parser("context", help="a session's turn context: last messages and the prior summary")
    ctx.add_argument("session")
    ctx.add_argument("--request", help="the incoming user input (the decision model keeps relevant entries)")
    ctx.add_argument("--limit", type=int, help="last messages to include (default: the context window, "
                                               "MEMORY_CONTEXT_MESSAGES, 16)")
    ctx.add_argument("--all", action="store_true", help="keep every summary entry (no decision model)")
    ctx.add_argument("--include-forks", action="store_true",
                     help="name the session's forks too (other branches), each with what it is about")
    ctx.add_argument("--json", action="store_true")
    ctx.set_defaults(func=cmd_context)

    search = sub.add_parser("search", help="unified memory search: facts, raw excerpts, sketches")
    search.add_argument("query")
    search.add_argument("--user", help="whose memory (required unless --admin)")
    search.add_argument("--scope", default="all", choices=SEARCH_SCOPES,
                        help="all (default), facts, raw, sketches or knowledge")
    search.add_argument("--k", type=int, default=5, help="hits per store at most, 1-20 (default 5)")
    search.add_argument("--budget", type=int, default=DEFAULT_BUDGET_CHARS,
                        help=f"characters the hits may take, in tier order (default {DEFAULT_BUDGET_CHARS:,}; "
                             "0: no budget)")
    search.add_argument("--budget-tokens", type=int, help="the budget in tokens instead (estimated, 4 characters each)")
    search.add_argument("--now", help="what times in the query count from (default: the user's newest turn)")
    search.add_argument("--session", help="narrow raw excerpts to one session (and rank its notes first)")
    search.add_argument("--mode", default="flat", choices=("flat", "forest"),
                        help="how passages are found: the flat turn index (default) or forest recall down the "
                             "temporal tree (each passage with its path of node summaries)")
    search.add_argument("--include-forks", action="store_true",
                        help="serve forked sessions' passages too, each labelled with its fork point")
    search.add_argument("--admin", action="store_true", help="search every user")
    search.add_argument("--json", action="store_true")
    search.set_defaults(func=cmd_search)

    bench = sub.add_parser("bench", help="benchmarks: distillation throughput and model cost, retrieval quality, "
                                         "search latency at scale, serving load")
    kinds = bench.add_subparsers(dest="kind", required=True)
    retrieval = kinds.add_parser("retrieval", help="recall of evidence turns at equal budgets over the labelled "
                                                   "evidence set (a database of its own, built once), per row and "
                                                   "category; --needles: the 22 needle questions over the sample")
    retrieval.add_argument("--k", type=int, default=10, help="hits for recall@k and nDCG@k (default 10)")
    retrieval.add_argument("--users", type=int, default=12, help="users of the evidence set (default 12)")
    retrieval.add_argument("--seed", type=int, default=0)
    retrieval.add_argument("--rebuild", action="store_true", help="build its database again even if it matches")
    retrieval.add_argument("--variants", action="store_true",
                           help="also the settings the defaults were chosen against (dense weight, time handling, "
                                "widening, fusion)")
    retrieval.add_argument("--needles", action="store_true",
                           help="the needle smoke instead: recall@k and nDCG@k of chunk search modes over the sample "
                                "in the pipeline's database (after `memory-pipelines run`)")
    retrieval.add_argument("--json", action="store_true")
    retrieval.set_defaults(func=cmd_bench)
    for kind, text in (("distill", "messages/s per stage, peak memory and table sizes of a run over generated "
                                   "transcripts, offline back ends"),
                       ("cost", "model calls and tokens per 1,000 messages of the same run, against the instant "
                                "wire-level model server")):
        distill = kinds.add_parser(kind, help=text)
        distill.add_argument("--users", type=int, default=1000, help="generated users (default 1,000)")
        distill.add_argument("--sessions", type=int, default=6000,
                             help="generated sessions (default 6,000: about 100,000 messages)")
        distill.add_argument("--days", type=int, default=14, help="days the sessions spread over (default 14)")
        distill.add_argument("--seed", type=int, default=0)
        distill.add_argument("--shards", type=_positive_int, help="user shards, each its own run, all at once "
                             "(default MEMORY_SHARDS)")
        distill.add_argument("--executor", choices=("in_process", "dask"), default="in_process",
                             help="dask: the runs' steps on a local scheduler and two worker processes")
        distill.add_argument("--json", action="store_true")
        if kind == "cost":
            distill.add_argument("--price-table", type=Path, default=None,
                                 help="prices to estimate the run's cost at, a MEMORY_PRICE_TABLE file (default: "
                                      "MEMORY_PRICE_TABLE, else the sample table of a few published list prices)")
        distill.set_defaults(func=cmd_bench_distill)
    ingest = kinds.add_parser("ingest", help="the transcripts asset over a large generated source (a file per "
                                              "day), from a folder and from a local S3 server: peak memory and "
                                              "records/s of one day and of a whole-range run")
    ingest.add_argument("--messages", type=int, default=5_000_000, help="generated messages (default 5,000,000: "
                                                                        "about 2 GB)")
    ingest.add_argument("--days", type=int, default=365, help="days they spread over (default 365)")
    ingest.add_argument("--seed", type=int, default=0)
    ingest.add_argument("--no-s3", action="store_true", help="the local folder only (the S3 server is moto, a test "
                                                              "dependency)")
    ingest.add_argument("--json", action="store_true")
    ingest.set_defaults(func=cmd_bench_ingest)
    backfill = kinds.add_parser(
        "backfill", help="the same generated sessions over a short and a long range (default 30 and 720 days), "
                         "each distilled as one run in a fresh database, offline back ends: what empty days cost")
    backfill.add_argument("--users", type=int, default=20, help="generated users (default 20)")
    backfill.add_argument("--sessions", type=int, default=200, help="generated sessions (default 200)")
    backfill.add_argument("--seed", type=int, default=3)
    backfill.add_argument("--short-days", type=int, default=30, help="default 30")
    backfill.add_argument("--long-days", type=int, default=720, help="default 720")
    backfill.add_argument("--json", action="store_true")
    backfill.set_defaults(func=cmd_bench_backfill)
    models = kinds.add_parser(
        "models", help="every prompt against a real model server: schema-valid answers on the first try, after the "
                       "one retry, failed; latency p50/p95 and tokens per purpose, over the sample's longest sessions")
    models.add_argument("--base-url", required=True, help="the server, e.g. http://127.0.0.1:8080/v1 (llama.cpp)")
    models.add_argument("--model", required=True, help="the model name the server answers to")
    models.add_argument("--backend", choices=("openai", "ollama"), default="openai",
                        help="the protocol (default openai: llama.cpp, vLLM, LM Studio, hosted APIs)")
    models.add_argument("--sessions", type=int, default=3, help="sample sessions, each through every prompt (default 3)")
    models.add_argument("--timeout", type=float, default=300.0, help="seconds per call (default 300: small CPU models)")
    models.add_argument("--json", action="store_true")
    models.set_defaults(func=cmd_bench_models)
    search_bench = kinds.add_parser(
        "search", help="search latency (p50/p95/p99) and vector recall@10 on a synthetic database of its own")
    search_bench.add_argument("--users", type=int, default=1_000, help="default 1,000")
    search_bench.add_argument("--chunks", type=int, default=1_000_000, help="default 1,000,000")
    search_bench.add_argument("--facts", type=int, default=100_000, help="default 100,000")
    search_bench.add_argument("--turns", type=int, default=0,
                              help="the turn-level scale: this many messages in the turn index, over the users "
                                   "(e.g. 2,000,000 with --chunks 1000); its paths are passages and unified search")
    search_bench.add_argument("--queries", type=int, default=300, help="timed queries per path (default 300)")
    search_bench.add_argument("--seed", type=int, default=0, help="of the data and the queries (default 0)")
    search_bench.add_argument("--embedder", choices=["hashing", "configured"], default="hashing",
                              help="hashing (default, fast to load) or the one MEMORY_EMBED_* configures")
    search_bench.add_argument("--rebuild", action="store_true", help="build the database again even if it matches")
    search_bench.add_argument("--json", action="store_true")
    search_bench.set_defaults(func=cmd_bench_search)
    serve_bench = kinds.add_parser(
        "serve", help="load on `serve http` and `serve mcp --http` (127.0.0.1): concurrent clients searching for a "
                      "fixed time over the configured database; requests/s, p50/p95/p99, errors")
    serve_bench.add_argument("--clients", type=int, default=50, help="concurrent clients (default 50)")
    serve_bench.add_argument("--seconds", type=float, default=30.0, help="per transport (default 30)")
    serve_bench.add_argument("--transport", action="append", choices=["http", "mcp"],
                             help="http or mcp, repeatable (default both)")
    serve_bench.add_argument("--workers", type=int, default=1, help="`serve http --workers` (default 1)")
    serve_bench.add_argument("--user", help="whose memory is searched (default: the user with the most facts)")
    serve_bench.add_argument("--budget", type=int, help="characters per answer (default: the API's)")
    serve_bench.add_argument("--json", action="store_true")
    serve_bench.set_defaults(func=cmd_bench_serve)

    forget = sub.add_parser("forget", help="delete a user's (or session's) messages and everything derived; lists "
                                           "what would go and asks first (--yes to skip, --dry-run to stop there)")
    forget.add_argument("--user", required=True)
    forget.add_argument("--session")
    confirm = forget.add_mutually_exclusive_group()
    confirm.add_argument("--yes", action="store_true", help="delete without asking")
    confirm.add_argument("--dry-run", action="store_true", help="only list what would be deleted")
    forget.add_argument("--undo", action="store_true", help="lift the tombstone so the transcripts can be ingested again")
    forget.set_defaults(func=cmd_forget)

    export = sub.add_parser("export", help="export knowledge entries")
    export.add_argument("format", choices=["markdown"])
    export.add_argument("dir")
    export.add_argument("--user", help="that user's entries and global ones (default: all)")
    export.set_defaults(func=cmd_export)

    archive = sub.add_parser("archive", help="memory_archive: list what decay, expiry and retention moved out, "
                                             "and restore it (in bulk, dry run first)")
    archive_actions = archive.add_subparsers(dest="action", required=True)
    for action, text in (("list", "archived rows, newest last"),
                         ("restore", "put archived rows back: ids, or every row of a run, reason or time; a dry run "
                                     "unless --yes")):
        command = archive_actions.add_parser(action, help=text)
        if action == "restore":
            command.add_argument("ids", nargs="*", type=int, help="archive row ids (as `archive list` shows them)")
        command.add_argument("--run", help="the rows one run archived (its run id)")
        command.add_argument("--reason", choices=ARCHIVE_REASONS, help="the rows archived for this reason")
        command.add_argument("--since", help="the rows archived at or after this date or time (UTC unless given)")
        command.add_argument("--user", help="one user's rows")
        if action == "list":
            command.add_argument("--limit", type=int, default=200, help="at most this many rows (default 200)")
            command.add_argument("--json", action="store_true")
            command.set_defaults(func=cmd_archive_list)
        else:
            command.add_argument("--yes", action="store_true", help="restore them (without it: only show what would)")
            command.set_defaults(func=cmd_archive_restore, limit=None)

    from memory_pipelines.records import QuarantineReason

    quarantine = sub.add_parser("quarantine", help="refused records still open (file and line, reason, detail, run); "
                                                   "--resolved: those a later run stored, with when and which run")
    shown = quarantine.add_mutually_exclusive_group()
    shown.add_argument("--resolved", action="store_true", help="only the refusals a later run resolved")
    shown.add_argument("--all", action="store_true", help="open and resolved refusals")
    quarantine.add_argument("--reason", choices=[r.value for r in QuarantineReason], help="one reason's refusals")
    quarantine.add_argument("--limit", type=_positive_int, default=200, help="at most this many rows (default 200)")
    quarantine.add_argument("--json", action="store_true", help="the rows as JSON, raw text included")
    quarantine.set_defaults(func=cmd_quarantine)

    embeddings = sub.add_parser("embeddings", help="stored vectors per table and model, against the configured embedder")
    embeddings.add_argument("action", choices=["status"])
    embeddings.set_defaults(func=cmd_embeddings)

    users = sub.add_parser("users", help="the users memory is stored for, with counts")
    users.set_defaults(func=cmd_users)

    sessions = sub.add_parser("sessions", help="a user's sessions: times, messages, chunks, summary, extraction")
    sessions.add_argument("--user", required=True)
    sessions.set_defaults(func=cmd_sessions)

    turns = sub.add_parser("turns", help="a user's (or session's) turns by decay score: importance from the entries "
                                         "and facts citing them, age, accesses (each listed turn counts an access)")
    turns.add_argument("--user", required=True)
    turns.add_argument("--session", help="one of the user's sessions")
    turns.add_argument("--k", type=int, default=10, help="turns to list, 1-100 (default 10)")
    turns.add_argument("--json", action="store_true", help="every score's parts too")
    turns.set_defaults(func=cmd_turns)

    fork = sub.add_parser("fork", help="fork a session: a new session sharing its turns up to --at")
    fork.add_argument("session")
    fork.add_argument("--at", type=int, help="the last shared turn (default: the session's last)")
    fork.add_argument("--as", dest="as_", required=True, metavar="NEW", help="the fork's session id")
    fork.add_argument("--by", default="cli", help="who forks (recorded)")
    fork.set_defaults(func=cmd_fork)

    merge = sub.add_parser("merge", help="merge a fork's turns into its parent (append, replace or summarize), "
                                         "or --restore the merge in force")
    merge.add_argument("fork")
    merge.add_argument("--into", required=True, metavar="PARENT")
    merge.add_argument("--mode", choices=MERGE_MODES)
    merge.add_argument("--dry-run", action="store_true", help="print what the merge would write; change nothing")
    merge.add_argument("--restore", action="store_true", help="undo the merge in force of FORK into PARENT")
    merge.add_argument("--by", default="cli", help="who merges (recorded)")
    merge.set_defaults(func=cmd_merge)

    tree = sub.add_parser("tree", help="the temporal tree: a user's scene tree and session trees")
    tree_actions = tree.add_subparsers(dest="action", required=True)
    show = tree_actions.add_parser("show", help="print a user's scene tree and session trees (or one session's "
                                               "tree) with time spans, seq spans, keys and summaries")
    show.add_argument("--user", required=True)
    target = show.add_mutually_exclusive_group()
    target.add_argument("--session", help="only this session's tree")
    target.add_argument("--entity", help="an entity's tree: what memory holds about it, by day, month and year")
    show.add_argument("--depth", type=int, help="levels to print from the top (default: all)")
    show.set_defaults(func=cmd_tree_show)

    doctor = sub.add_parser("doctor", help="what to check when something is wrong: the settings, this CPU, the "
                                           "database (and a self-test on a throwaway server), disk, the embedder, "
                                           "model servers, Dagster's home; a line each, ok/warn/fail with the fix; "
                                           "exit 1 on a fail")
    doctor.add_argument("--json", action="store_true", help="the checks as a JSON list")
    doctor.set_defaults(func=cmd_doctor)

    config = sub.add_parser("config", help="the effective settings (secrets masked) and where each came from; "
                                           "exit 2 when one is invalid")
    config.set_defaults(func=cmd_config)

    lin = sub.add_parser("lineage", help="where a row came from: source messages, run, model, calls, merges")
    lin.add_argument("kind", choices=["fact", "chunk", "entry", "turn", "summary"])
    lin.add_argument("id", help="the row id (a session id for summary)")
    lin.add_argument("--json", action="store_true")
    lin.set_defaults(func=cmd_lineage)

    serve = sub.add_parser("serve", help="serve memory to agents: MCP (stdio or HTTP) or the REST API; every "
                                         "request acts as one API key's user")
    protocols = serve.add_subparsers(dest="protocol", required=True)
    for protocol, text in (("mcp", "an MCP server: stdio (the key in MEMORY_API_KEY), or streamable HTTP with --http"),
                           ("http", "the REST API (/v1/…, OpenAPI docs at /docs)")):
        command = protocols.add_parser(protocol, help=text)
        if protocol == "mcp":
            command.add_argument("--http", action="store_true", help="streamable HTTP at /mcp instead of stdio")
        command.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
        command.add_argument("--port", type=int, default=8765 if protocol == "mcp" else 8080)
        command.add_argument("--workers", type=int, default=1, help="server processes (HTTP API)")
        command.set_defaults(func=cmd_serve)

    keys = sub.add_parser("keys", help="API keys for `serve`: create (shown once), list, revoke")
    key_actions = keys.add_subparsers(dest="action", required=True)
    create = key_actions.add_parser("create", help="a key for one user (or --admin: every user); prints it once")
    create.add_argument("--user", help="the user the key reads and writes memory of")
    create.add_argument("--admin", action="store_true", help="a key that may act for every user (searches are logged)")
    create.add_argument("--name", help="a label, e.g. the agent that holds it")
    listing = key_actions.add_parser("list", help="every key: user, label, first characters, last use, state")
    listing.add_argument("--json", action="store_true")
    revoke = key_actions.add_parser("revoke", help="revoke a key: its requests get 401 from then on")
    revoke.add_argument("id", type=int, help="the key's id (as `keys list` shows it)")
    for command in (create, listing, revoke):
        command.set_defaults(func=cmd_keys, json=False)

    formats = sub.add_parser("formats", help="the format each transcript file is read in and what decided it "
                                             "(reads files only, no database)")
    formats.add_argument("paths", nargs="+", metavar="PATH", help="a transcript file or a folder (read recursively)")
    formats.add_argument("--json", action="store_true")
    formats.set_defaults(func=cmd_formats)

    gen = sub.add_parser("generate", help="write deterministic synthetic transcripts (for benchmarks)")
    gen.add_argument("out", help="output folder")
    gen.add_argument("--users", type=int, default=10)
    gen.add_argument("--sessions", type=int, default=100, help="sessions in all")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--days", type=int, default=14)
    gen.add_argument("--start", default="2026-10-01", help="first day, YYYY-MM-DD")
    gen.set_defaults(func=cmd_generate)
    return parser


def _error(message: str) -> None:
    for line in message.splitlines():
        print(f"memory-pipelines: error: {line}", file=sys.stderr)


# what a command was doing when the database went away, as its one-line error says it
DOING = {"run": "running the pipeline", "search": "searching", "context": "reading a session's context",
         "turns": "listing turns", "serve": "serving", "forget": "forgetting", "merge": "merging"}


# commands that only read memory: a bad setting they do not use is a warning for them, not a
# refusal (one they do use still refuses, when it is read)
READING_COMMANDS = frozenset({"users", "sessions", "search", "context", "turns", "tree", "lineage", "embeddings",
                              "export", "formats"})


def _checked_settings(command: str) -> list[str]:
    """Every setting parsed before anything runs; the warnings to print."""
    try:
        return validate_environment()
    except ConfigError as exc:
        if command not in READING_COMMANDS:
            raise
        return [f"{line} (ignored unless `{command}` needs it)" for line in str(exc).splitlines()]


def _server_log():
    """Where the embedded server's log ends as the command begins (settings unreadable: none)."""
    from memory_pipelines.db.outage import ServerLog

    try:
        settings = _settings()
    except ConfigError:
        return ServerLog(None)
    return ServerLog.of_home(settings.home, settings.database_url)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:  # a pool refilling while the server restarts: the command's own error says what happened
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    server_log = _server_log()
    raise_on_stop_signals()
    try:
        if args.func not in (cmd_config, cmd_doctor):  # every setting checked before anything runs (they say it)
            for warning in _checked_settings(args.command):
                print(f"memory-pipelines: warning: {warning}", file=sys.stderr)
        return args.func(args)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: stopped, not failed
        stopped = exc if isinstance(exc, Interrupted) else Interrupted()
        print(f"memory-pipelines: stopped by {signal.Signals(stopped.signum).name}"
              + (f": {exc.__cause__}" if exc.__cause__ else ""), file=sys.stderr)
        return stopped.exit_status
    except (UsageError, ConfigError) as exc:
        _error(str(exc))
        return 2
    except CliError as exc:
        _error(str(exc))
        return 1
    except Exception as exc:  # noqa: BLE001 - the CLI promises a one-line reason, never a traceback
        from memory_pipelines.db.outage import DatabaseLost, connection_lost

        if connection_lost(exc):
            _error(str(DatabaseLost(DOING.get(args.command, f"running `{args.command}`"), server_log)))
            if args.verbose:
                raise
            return 1
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"memory-pipelines: error: {type(exc).__name__}: {reason}", file=sys.stderr)
        if args.verbose:
            raise
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""`memory-pipelines`: run the pipeline, manage the embedded database, open the UI."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
from datetime import date
from pathlib import Path

from memory_pipelines.config import ConfigError, Settings


class CliError(RuntimeError):
    """Ends the command with a one-line reason and exit status 1."""


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
        raise CliError(f"{flag} must be a date like 2026-10-01, got {text!r}") from None


def cmd_run(args: argparse.Namespace) -> int:
    if args.transcripts:
        path = Path(args.transcripts).expanduser().resolve()
        if not path.exists():
            raise CliError(f"transcript path does not exist: {path}")
        os.environ["MEMORY_TRANSCRIPTS"] = str(path)
    settings = _settings()
    start, end = _parse_day(args.start, "--start"), _parse_day(args.end, "--end")
    if start is None or end is None:
        from memory_pipelines.transcripts import transcript_date_range

        found = transcript_date_range(
            settings.transcripts, timezone=settings.timezone, max_bytes=settings.max_message_bytes
        )
        if found is None:
            raise CliError(f"no transcript records under {settings.transcripts}")
        start, end = start or found[0], end or found[1]
    if end < start:
        raise CliError(f"--end {end} is before --start {start}")

    from memory_pipelines.db import repository
    from memory_pipelines.db.connection import get_pool

    url = _connect_url(settings)
    pool = get_pool(url)  # migrates before any run starts
    from assets.runner import RunFailed, ensure_dagster_home, partition_keys_between, run_partitions

    ensure_dagster_home(settings.home, settings.database_url)
    try:
        keys = partition_keys_between(start.isoformat(), end.isoformat())
    except ValueError as exc:
        raise CliError(str(exc)) from None
    print(f"transcripts: {settings.transcripts}")
    print(f"partitions:  {keys[0]} .. {keys[-1]} ({len(keys)} days)")
    try:
        runs = run_partitions(keys)
    except RunFailed as exc:
        raise CliError(str(exc)) from None
    with pool.connection() as conn:
        counts = repository.row_counts(conn, repository.list_tables(conn))
    width = max(len(t) for t in counts)
    print(f"done: {len(runs)} partition(s) in {sum(r.seconds for r in runs):.1f}s")
    for table, count in counts.items():
        print(f"  {table:<{width}}  {count:>8}")
    return 0


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
    _connect_url(settings)  # start the embedded server before Dagster's processes join it
    ensure_dagster_home(settings.home, settings.database_url)
    command = [sys.executable, "-m", "dagster", "dev", *_workspace_args(), "-h", args.host, "-p", str(args.port)]
    # A shell that started us in the background leaves SIGINT ignored, and dagster dev maps
    # SIGTERM to SIGINT: restore the default in the child so both stop it.
    child = subprocess.Popen(command, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def forward(signum, _frame):
        child.send_signal(signal.SIGINT)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:
        return child.wait()
    finally:
        if child.poll() is None:
            child.kill()


def cmd_context(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.llm import build_backend
    from memory_pipelines.llm.config import decision_config
    from memory_pipelines.query import context_for

    pool = get_pool(_connect_url(_settings()))
    decision = None if args.all else build_backend(decision_config())
    try:
        with pool.connection() as conn:
            context = context_for(conn, args.session, args.request, limit=args.limit, decision=decision)
    finally:
        if decision is not None:
            decision.close()
    if args.json:
        print(json.dumps({"session_id": context.session_id, "relevance": context.relevance,
                          "summary": context.summary.to_json() if context.summary else None,
                          "messages": context.chat_messages(args.request or "")}, ensure_ascii=False, indent=2))
        return 0
    print(f"# context for {context.session_id} ({len(context.messages)} messages, summary: {context.relevance})")
    for message in context.chat_messages(args.request or ""):
        print(f"\n[{message['role']}]\n{message['content']}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.embed import build_embedder, embed_config
    from memory_pipelines.search import UnifiedMemorySearch, format_hits

    if args.user is None and not args.admin:
        raise CliError("--user is required (searching every user needs --admin)")
    pool = get_pool(_connect_url(_settings()))
    embedder = build_embedder(embed_config())
    try:
        with pool.connection() as conn:
            hits = UnifiedMemorySearch(conn, embedder, admin=args.admin).search(
                args.query, scope=args.scope, k=args.k, user_id=args.user, session_id=args.session,
                current_session_id=args.session)
    finally:
        embedder.close()
    if args.json:
        print(json.dumps([asdict(h) for h in hits], ensure_ascii=False, indent=2, default=str))
    else:
        print(format_hits(args.query, args.scope, hits))
    return 0


def cmd_bench_distill(args: argparse.Namespace) -> int:
    from assets.benchmarks import run_distill_benchmark
    from memory_pipelines import bench
    from memory_pipelines.generator import GeneratorConfig

    try:
        config = GeneratorConfig(users=args.users, sessions=args.sessions, seed=args.seed, days=args.days)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    result = run_distill_benchmark(config, cost=args.kind == "cost", echo=lambda line: print(line, file=sys.stderr))
    print(json.dumps(result.to_json(), indent=2) if args.json else bench.distill_markdown(result))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from memory_pipelines import bench
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.embed import build_embedder, embed_config

    pool = get_pool(_connect_url(_settings()))
    embedder = build_embedder(embed_config())
    try:
        with pool.connection() as conn:
            scores = bench.retrieval(conn, embedder, k=args.k)
    finally:
        embedder.close()
    if not any(s.questions for s in scores):
        raise CliError("no labelled question has a relevant chunk: run `memory-pipelines run` on the sample first")
    if args.json:
        print(json.dumps({"embedder": embedder.model_id, "k": args.k, "modes": [asdict(s) for s in scores]}, indent=2))
    else:
        print(bench.markdown(scores, args.k, embedder.model_id))
    return 0


def cmd_bench_search(args: argparse.Namespace) -> int:
    from memory_pipelines import bench_search
    from memory_pipelines.embed import EmbedConfig, build_embedder, embed_config

    try:
        config = bench_search.SearchBenchConfig(users=args.users, chunks=args.chunks, facts=args.facts,
                                                queries=args.queries, seed=args.seed)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    url = _connect_url(_settings())
    embedder = build_embedder(EmbedConfig() if args.embedder == "hashing" else embed_config())
    try:
        result = bench_search.run(url, config, embedder, rebuild=args.rebuild,
                                  progress=lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        embedder.close()
    print(bench_search.to_json(result) if args.json else bench_search.markdown(result))
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lifecycle import forget, unforget

    pool = get_pool(_connect_url(_settings()))
    with pool.connection() as conn, conn.transaction():
        if args.undo:
            lifted = unforget(conn, args.user, args.session)
            print("tombstone lifted: the transcripts can be ingested again" if lifted else "nothing was forgotten")
            return 0
        removed = forget(conn, args.user, args.session)
    target = f"session {args.session} of user {args.user}" if args.session else f"user {args.user}"
    print(f"forgot {target}: {sum(removed.values())} rows")
    for table, count in removed.items():
        if count:
            print(f"  {table:<28} {count:>7}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lifecycle import export_markdown

    pool = get_pool(_connect_url(_settings()))
    with pool.connection() as conn:
        written = export_markdown(conn, Path(args.dir), args.user)
    print(f"wrote {len(written)} file(s) to {Path(args.dir).resolve()}")
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.lifecycle import restore

    pool = get_pool(_connect_url(_settings()))
    with pool.connection() as conn, conn.transaction():
        try:
            restored = restore(conn, args.id)
        except LookupError as exc:
            raise CliError(str(exc)) from None
    for table, source_id in restored:
        print(f"restored {table} row {source_id}")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memory-pipelines", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="materialize the whole asset graph for every partition in range")
    run.add_argument("--transcripts", help="transcript file or folder (default: MEMORY_TRANSCRIPTS or the sample)")
    run.add_argument("--start", help="first day, YYYY-MM-DD (default: the first day in the transcripts)")
    run.add_argument("--end", help="last day, inclusive (default: the last day in the transcripts)")
    run.set_defaults(func=cmd_run)

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
    ctx.add_argument("--limit", type=int, default=16, help="last messages to include (default 16)")
    ctx.add_argument("--all", action="store_true", help="keep every summary entry (no decision model)")
    ctx.add_argument("--json", action="store_true")
    ctx.set_defaults(func=cmd_context)

    search = sub.add_parser("search", help="unified memory search: facts, raw excerpts, sketches")
    search.add_argument("query")
    search.add_argument("--user", help="whose memory (required unless --admin)")
    search.add_argument("--scope", default="all", help="all (default), facts, raw or sketches")
    search.add_argument("--k", type=int, default=5, help="hits per store, 1-20 (default 5)")
    search.add_argument("--session", help="narrow raw excerpts to one session (and rank its notes first)")
    search.add_argument("--admin", action="store_true", help="search every user")
    search.add_argument("--json", action="store_true")
    search.set_defaults(func=cmd_search)

    bench = sub.add_parser("bench", help="benchmarks: distillation throughput and model cost, retrieval quality, "
                                         "search latency at scale")
    kinds = bench.add_subparsers(dest="kind", required=True)
    retrieval = kinds.add_parser("retrieval", help="recall@k and nDCG@k over the labelled sample: each chunk "
                                                   "search mode, unified search, what extra keys of chunks add")
    retrieval.add_argument("--k", type=int, default=5)
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
        distill.add_argument("--json", action="store_true")
        distill.set_defaults(func=cmd_bench_distill)
    search_bench = kinds.add_parser(
        "search", help="search latency (p50/p95/p99) and vector recall@10 on a synthetic database of its own")
    search_bench.add_argument("--users", type=int, default=1_000, help="default 1,000")
    search_bench.add_argument("--chunks", type=int, default=1_000_000, help="default 1,000,000")
    search_bench.add_argument("--facts", type=int, default=100_000, help="default 100,000")
    search_bench.add_argument("--queries", type=int, default=300, help="timed queries per path (default 300)")
    search_bench.add_argument("--seed", type=int, default=0, help="of the data and the queries (default 0)")
    search_bench.add_argument("--embedder", choices=["hashing", "configured"], default="hashing",
                              help="hashing (default, fast to load) or the one MEMORY_EMBED_* configures")
    search_bench.add_argument("--rebuild", action="store_true", help="build the database again even if it matches")
    search_bench.add_argument("--json", action="store_true")
    search_bench.set_defaults(func=cmd_bench_search)

    forget = sub.add_parser("forget", help="delete a user's (or session's) messages and everything derived")
    forget.add_argument("--user", required=True)
    forget.add_argument("--session")
    forget.add_argument("--undo", action="store_true", help="lift the tombstone so the transcripts can be ingested again")
    forget.set_defaults(func=cmd_forget)

    export = sub.add_parser("export", help="export knowledge entries")
    export.add_argument("format", choices=["markdown"])
    export.add_argument("dir")
    export.add_argument("--user", help="that user's entries and global ones (default: all)")
    export.set_defaults(func=cmd_export)

    archive = sub.add_parser("archive", help="memory_archive: restore a row")
    archive.add_argument("action", choices=["restore"])
    archive.add_argument("id", type=int)
    archive.set_defaults(func=cmd_archive)

    lin = sub.add_parser("lineage", help="where a row came from: source messages, run, model, calls, merges")
    lin.add_argument("kind", choices=["fact", "chunk", "entry", "summary"])
    lin.add_argument("id", help="the row id (a session id for summary)")
    lin.add_argument("--json", action="store_true")
    lin.set_defaults(func=cmd_lineage)

    gen = sub.add_parser("generate", help="write deterministic synthetic transcripts (for benchmarks)")
    gen.add_argument("out", help="output folder")
    gen.add_argument("--users", type=int, default=10)
    gen.add_argument("--sessions", type=int, default=100, help="sessions in all")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--days", type=int, default=14)
    gen.add_argument("--start", default="2026-10-01", help="first day, YYYY-MM-DD")
    gen.set_defaults(func=cmd_generate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (CliError, ConfigError) as exc:
        print(f"memory-pipelines: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - the CLI promises a one-line reason, never a traceback
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"memory-pipelines: error: {type(exc).__name__}: {reason}", file=sys.stderr)
        if args.verbose:
            raise
        return 1


if __name__ == "__main__":
    sys.exit(main())

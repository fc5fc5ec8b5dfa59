"""`bench`: distillation throughput and model cost, ingest, backfill, model servers, retrieval quality, search latency
at scale, serving load."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from memory_pipelines.cli.common import CliError, UsageError, _connect_url, _positive_int
from memory_pipelines.cli.serve import _serving_database
from memory_pipelines.config import EMBED_BACKENDS, ConfigError, Settings


def _benchmark_settings(settings: Settings) -> Settings:
    """The settings a benchmark defines the assets with, before it imports them: it
    distills into a database of its own, so its partitions do not start at the first day of
    the pipeline's."""
    from assets.location import use_settings
    from assets.partition_start import fixed_start

    settings = fixed_start(settings)
    use_settings(settings)
    return settings


def cmd_bench_distill(args: argparse.Namespace, settings: Settings) -> int:
    if args.shards is not None:
        settings = replace(settings, shards=args.shards)
    settings = _benchmark_settings(replace(settings, embed_backend=args.embedder))
    from assets.bench.distill import run_distill_benchmark
    from memory_pipelines.bench.distill import distill_markdown
    from memory_pipelines.generator import GeneratorConfig
    from memory_pipelines.llm.pricing import bench_price_table, load_price_table

    try:
        config = GeneratorConfig(users=args.users, sessions=args.sessions, seed=args.seed, days=args.days)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    prices = None
    if args.kind == "cost":
        try:
            prices = load_price_table(args.price_table or bench_price_table(settings.price_table))
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    result = run_distill_benchmark(config, settings, cost=args.kind == "cost", echo=lambda line: print(line, file=sys.stderr),
                                   executor=args.executor)
    print(json.dumps(result.to_json(prices), indent=2) if args.json else distill_markdown(result, prices))
    return 0


def cmd_bench_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from assets.bench.ingest import ingest_markdown, run_ingest_benchmark
    from memory_pipelines.generator import DayFilesConfig

    try:
        config = DayFilesConfig(messages=args.messages, days=args.days, seed=args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    result = run_ingest_benchmark(config, settings, s3=not args.no_s3, echo=lambda line: print(line, file=sys.stderr))
    print(json.dumps(result.to_json(), indent=2) if args.json else ingest_markdown(result))
    return 0


def cmd_bench_models(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.bench import models as bench_models
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


def cmd_bench_backfill(args: argparse.Namespace, settings: Settings) -> int:
    settings = _benchmark_settings(settings)
    from assets.bench.distill import run_backfill_benchmark
    from memory_pipelines.bench.distill import backfill_markdown

    if not 1 <= args.short_days < args.long_days:
        raise UsageError(f"--short-days {args.short_days} must be at least 1 and below --long-days {args.long_days}")
    try:
        result = run_backfill_benchmark(args.users, args.sessions, args.seed, args.short_days, args.long_days, settings,
                                        echo=lambda line: print(line, file=sys.stderr, flush=True))
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(json.dumps(result.to_json(), indent=2) if args.json else backfill_markdown(result))
    return 0


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import asdict

    from memory_pipelines.bench import needles, retrieval
    from memory_pipelines.db.connection import get_pool
    from memory_pipelines.embed import build_embedder, embed_config

    embedder = build_embedder(embed_config(settings))
    try:
        if args.needles:
            pool = get_pool(_connect_url(settings))
            with pool.connection() as conn:
                scores = needles.retrieval(conn, embedder, k=args.k)
            if not any(s.questions for s in scores):
                raise CliError("no labelled question has a relevant chunk: run `memory-pipelines run` on the sample "
                               "first")
            if args.json:
                print(json.dumps({"embedder": embedder.model_id, "k": args.k, "modes": [asdict(s) for s in scores]},
                                 indent=2))
            else:
                print(needles.markdown(scores, args.k, embedder.model_id))
            return 0
        settings = _benchmark_settings(settings)
        from assets.bench.distill import evidence_database
        from memory_pipelines.bench.evidence_set import load_questions

        url, written = evidence_database(args.users, args.seed, embedder.model_id, settings,
                                         year_users=args.year_users, rebuild=args.rebuild, echo=lambda line: print(line, file=sys.stderr, flush=True))
        questions = load_questions(written.questions)
        rows = (*retrieval.EVIDENCE_ROWS, *(retrieval.VARIANT_ROWS if args.variants else ()),
                *(retrieval.ABLATION_ROWS if args.ablations else ()))
        if args.row:
            unknown = [r for r in args.row if r not in rows]
            if unknown:
                raise UsageError(f"unknown row {unknown[0]!r}: use one of {', '.join(rows)} (--variants and "
                                 "--ablations add theirs)")
            rows = tuple(r for r in rows if r in args.row)
        with get_pool(url).connection() as conn:
            scores = retrieval.evidence_retrieval(conn, embedder, questions, rows=rows, k=args.k)
    finally:
        embedder.close()
    if args.json:
        print(json.dumps({"embedder": embedder.model_id, "k": args.k, "questions": len(questions),
                          "by_category": written.by_category, "by_set": written.by_set,
                          "rows": [asdict(s) for s in scores]}, indent=2))
    else:
        print(retrieval.evidence_markdown(scores, args.k, embedder.model_id, len(questions)))
    return 0


def cmd_bench_search(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.bench.search import report, timing
    from memory_pipelines.bench.search.build import SearchBenchConfig
    from memory_pipelines.embed import EmbedConfig, build_embedder, embed_config

    try:
        config = SearchBenchConfig(users=args.users, chunks=args.chunks, facts=args.facts, queries=args.queries,
                                   seed=args.seed, turns=args.turns)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    url = _connect_url(settings)
    embedder = build_embedder(EmbedConfig() if args.embedder == "hashing" else embed_config(settings))
    try:
        result = timing.run(url, config, embedder, rebuild=args.rebuild,
                            progress=lambda line: print(line, file=sys.stderr, flush=True))
    finally:
        embedder.close()
    print(report.to_json(result) if args.json else report.markdown(result))
    return 0


def cmd_bench_serve(args: argparse.Namespace, settings: Settings) -> int:
    from memory_pipelines.bench import serve as bench_serve

    try:
        config = bench_serve.ServeBenchConfig(clients=args.clients, seconds=args.seconds, workers=args.workers,
                                              transports=tuple(args.transport or bench_serve.TRANSPORTS),
                                              user=args.user, budget=args.budget)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    settings = _serving_database(settings)
    try:
        result = bench_serve.run(settings, config, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except bench_serve.ServeBenchError as exc:
        raise CliError(str(exc)) from None
    print(bench_serve.to_json(result) if args.json else bench_serve.markdown(result))
    return 0


def register_bench(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="benchmarks: distillation throughput and model cost, retrieval quality, "
                                         "search latency at scale, serving load")
    kinds = bench.add_subparsers(dest="kind", required=True)
    retrieval = kinds.add_parser("retrieval", help="recall of evidence turns at equal budgets over the labelled "
                                                   "evidence set (a database of its own, built once), per row and "
                                                   "category; --needles: the 22 needle questions over the sample")
    retrieval.add_argument("--k", type=int, default=10, help="hits for recall@k and nDCG@k (default 10)")
    retrieval.add_argument("--users", type=int, default=12, help="users of the evidence set's first part (default 12)")
    retrieval.add_argument("--year-users", type=int, default=7,
                           help="users of its year of long conversations, questions of spread evidence and about the "
                                "person (default 7; 0: none)")
    retrieval.add_argument("--seed", type=int, default=0)
    retrieval.add_argument("--rebuild", action="store_true", help="build its database again even if it matches")
    retrieval.add_argument("--variants", action="store_true",
                           help="also the settings the defaults were chosen against (dense weight, time handling, "
                                "widening, fusion)")
    retrieval.add_argument("--ablations", action="store_true",
                           help="also unified search without each choice that spreads its budget (session penalty, "
                                "question parts, self statements first, chatter dropped, best turns alone within 1,440 "
                                "characters), and with the alternatives "
                                "measured against them")
    retrieval.add_argument("--row", action="append", metavar="ROW",
                           help="measure only this row (repeatable; names as in the report, e.g. "
                                "\"unified (the agent's tool)\")")
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
        distill.add_argument("--embedder", choices=EMBED_BACKENDS, default="hashing",
                             help="the run's embedder (default hashing: the pipeline without model time; local: "
                                  "MiniLM through torch; onnx: MiniLM through ONNX Runtime at "
                                  "MEMORY_EMBED_PRECISION, the default when the 'local' extra is installed; "
                                  "model2vec: a static model distilled "
                                  "from MiniLM, MEMORY_EMBED_DIM; ollama and openai as MEMORY_EMBED_* "
                                  "configure them), also timed alone on the run's texts")
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

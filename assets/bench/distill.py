"""`memory-pipelines bench distill|cost|backfill`: generated transcripts through the whole asset graph;
and the labelled evidence set through it for `bench retrieval` (`evidence_database`).

Both run in a database of their own on the configured server (`memory_bench_distill`,
rebuilt each time), never in the user's. `distill` uses the offline back ends (rules,
hashing embedder) to measure the pipeline without model time; `cost` points the chat and
decision models at the instant wire-level server (`memory_pipelines.llm.instant_server`)
to count the calls and tokens a real model would get.
"""

import hashlib
import re
import resource
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import psutil
import psycopg



from assets.run.dask_executor import local_cluster
from assets.run.runner import (
    PROGRESS_RUN_CONFIG, ensure_dagster_home, partition_keys_between, progress_logger, run_instance, run_range,
    run_shards,
)
from memory_pipelines.bench.database import fresh_database, reused_or_built
from memory_pipelines.bench.distill import (
    SAMPLE_SECONDS, BackfillBench, DatabaseLoad, DistillBench, EmbedderRate, PurposeUsage,
)
from memory_pipelines.bench.evidence_set import EvidenceSet, write_evidence_set
from memory_pipelines.config import SPECS, Settings, child_environment
from memory_pipelines.db import bench as bench_db
from memory_pipelines.db import schema as schema_db
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.db import transcripts as transcripts_db
from memory_pipelines.db.connection import close_pools, get_pool, resolve_url
from memory_pipelines.embed import build_embedder, embed_config
from memory_pipelines.generator import GeneratorConfig, write_transcripts
from memory_pipelines.llm.instant_server import InstantModelServer
from memory_pipelines.quality_gates import expectations
from memory_pipelines.sources import inventory_of
from memory_pipelines.stages import embeddings

BENCH_DATABASE = "memory_bench_distill"


def _stage_seconds(run_id: str) -> dict[str, float]:
    return {step.step_key: step.end_time - step.start_time
            for step in dg.DagsterInstance.get().get_run_step_stats(run_id) if step.start_time and step.end_time}


def _idle_copy(assets_def: dg.AssetsDefinition) -> dg.AssetsDefinition:
    """The asset (or multi-asset) with the same keys, dependencies, partitions and checks and
    a body that does nothing."""
    checks = list(assets_def.check_specs)

    @dg.multi_asset(name=assets_def.node_def.name, specs=list(assets_def.specs), check_specs=checks)
    def idle(context: dg.AssetExecutionContext):
        for key in sorted(context.selected_asset_keys):
            yield dg.MaterializeResult(asset_key=key)
        for spec in checks:
            yield dg.AssetCheckResult(passed=True, asset_key=spec.asset_key, check_name=spec.name)

    return idle


def bookkeeping_seconds(keys: Sequence[str]) -> float:
    """What Dagster alone costs to run the graph over the days `keys` as one run: the same
    assets and checks doing nothing, on the same instance, logging as a real run does."""
    from assets.definitions import all_assets, distill_job

    job = dg.Definitions(assets=[_idle_copy(a) for a in all_assets], jobs=[distill_job],
                         loggers={"progress": progress_logger(lambda line: None)}).resolve_job_def("distill")
    with run_instance() as instance:  # as a real run holds Dagster's storage
        started = time.perf_counter()
        job.execute_in_process(instance=instance, run_config=PROGRESS_RUN_CONFIG, tags={
            "dagster/asset_partition_range_start": keys[0], "dagster/asset_partition_range_end": keys[-1]})
        return time.perf_counter() - started


def _server_process(conn: psycopg.Connection) -> psutil.Process | None:
    """The server's postmaster when it runs on this machine (its backend's parent)."""
    host = conn.info.host
    if not (host.startswith("/") or host in ("localhost", "127.0.0.1", "::1")):
        return None
    try:
        postmaster = psutil.Process(conn.info.backend_pid).parent()
        return postmaster if postmaster is not None and postmaster.name().startswith("postgres") else None
    except psutil.Error:
        return None


def _server_cpu_seconds(postmaster: psutil.Process | None) -> float | None:
    """The postmaster's CPU, its ended children's (which it reaped) and its live children's."""
    if postmaster is None:
        return None
    own = postmaster.cpu_times()
    total = own.user + own.system + own.children_user + own.children_system
    for child in postmaster.children():
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def _cpu_seconds(process: psutil.Process | None) -> float:
    """A process's CPU seconds so far, every thread's (0 for none: a server elsewhere)."""
    if process is None:
        return 0.0
    times = process.cpu_times()
    return times.user + times.system


def _machine_cpu() -> tuple[float, float]:
    """Every process's CPU seconds on this machine so far, and the seconds waiting on I/O."""
    times = psutil.cpu_times()
    return times.user + times.nice + times.system + times.irq + times.softirq, times.iowait


@contextmanager
def _database_load(url: str, interval: float = SAMPLE_SECONDS) -> Iterator[list[DatabaseLoad]]:
    """What the server did while inside: its client connections sampled every `interval`
    seconds, its counters and CPU read before and after (the one it holds, then, on success)."""
    loads: list[DatabaseLoad] = []
    doing: dict[str, dict[str, float]] = {}
    peaks = {"connections": 0, "active": 0}
    done = threading.Event()
    sampler_cpu = [0.0]  # the sampling thread's own CPU
    with psycopg.connect(url, autocommit=True) as conn:
        server = _server_process(conn)
        sampler_backend = psutil.Process(conn.info.backend_pid) if server is not None else None

        def sample() -> None:
            last = time.monotonic()
            while not done.wait(interval):
                now = time.monotonic()
                rows = bench_db.server_activity(conn)
                peaks["connections"] = max(peaks["connections"], sum(r["connections"] for r in rows))
                peaks["active"] = max(peaks["active"], sum(r["connections"] for r in rows
                                                           if r["kind"] not in ("idle", "idle in transaction")))
                for r in rows:
                    if r["kind"] != "idle":
                        events = doing.setdefault(r["kind"], {})
                        events[r["event"]] = events.get(r["event"], 0.0) + r["connections"] * (now - last)
                last = now
            sampler_cpu[0] = time.thread_time()

        before = bench_db.server_counters(conn)
        server_before, (machine_before, iowait_before) = _server_cpu_seconds(server), _machine_cpu()
        process_before, backend_before = _cpu_seconds(psutil.Process()), _cpu_seconds(sampler_backend)
        started = time.monotonic()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            yield loads
        finally:
            done.set()
            sampler.join()
        seconds = time.monotonic() - started
        server_after, (machine_after, iowait_after) = _server_cpu_seconds(server), _machine_cpu()
        process_after, backend_after = _cpu_seconds(psutil.Process()), _cpu_seconds(sampler_backend)
        time.sleep(2)  # an idle backend reports its statistics within a second or so
        after = bench_db.server_counters(conn)
    change = {name: after[name] - before[name] for name in after}
    sampler_server = backend_after - backend_before
    loads.append(DatabaseLoad(
        seconds=seconds, connections_peak=peaks["connections"], active_peak=peaks["active"], doing_seconds=doing,
        server_cpu_seconds=None if server_before is None else server_after - server_before - sampler_server,
        machine_cpu_seconds=machine_after - machine_before, machine_iowait_seconds=iowait_after - iowait_before,
        process_cpu_seconds=process_after - process_before - sampler_cpu[0],
        sampler_process_cpu_seconds=sampler_cpu[0], sampler_server_cpu_seconds=sampler_server,
        cores=psutil.cpu_count() or 1, **change))


def _model_server_settings(settings: Settings, url: str) -> Settings:
    """Both models (chat and decision) on the instant server at `url`."""
    return replace(settings, **{SPECS[f"{prefix}_{name}"].field: value for prefix in ("MEMORY_LLM", "MEMORY_DECISION")
                                for name, value in (("BACKEND", "ollama"), ("BASE_URL", url), ("MODEL", "instant"))})


def run_distill_benchmark(config: GeneratorConfig, settings: Settings, *, cost: bool, bookkeeping: bool = False,
                          echo: Callable[[str], None] = print, executor: str = "in_process") -> DistillBench:
    """The generated transcripts through the whole graph with `settings` (the assets defined
    from them: `fixed_start`): one run, or with MEMORY_SHARDS above 1 one run per shard all at
    once; with `executor` dask, on a local scheduler and two worker processes started for it."""
    with tempfile.TemporaryDirectory(prefix="memory-bench-") as folder:
        transcripts = Path(folder) / "transcripts"
        stats = write_transcripts(transcripts, config)
        echo(f"generated {stats.messages:,} messages in {stats.sessions:,} sessions of {stats.users:,} users")
        url = fresh_database(settings, BENCH_DATABASE)
        found = inventory_of(str(transcripts))
        first, last, days_with_data = found.first_day, found.last_day, found.days
        server = InstantModelServer() if cost else None
        run = replace(settings, database_url=url, transcripts=str(transcripts),
                      embed_backend=settings.embed_backend or "hashing")
        if server is not None:
            run = _model_server_settings(run, server.url)
        try:
            with ExitStack() as stack:
                ensure_dagster_home(settings.home, url, max_concurrent_runs=settings.max_concurrent_runs)
                # set-up, not distillation, stays outside the timing: migrations, Dagster's
                # storage (made above), the dask cluster, loading the embedder
                get_pool(url)
                expectations.prepare()
                loading = _embedder_load_seconds(run)
                if executor == "dask":
                    address = stack.enter_context(local_cluster(child_environment(run), Path(folder) / "logs"))
                    run = replace(run, executor="dask", dask_scheduler=address)
                keys = partition_keys_between(first.isoformat(), last.isoformat())
                with _database_load(url) as load:
                    started = time.perf_counter()
                    runs = run_shards(keys, run, range(run.shards), parallel=run.shards, echo=lambda line: None,
                                      show_steps=False)
                    seconds = time.perf_counter() - started
                with get_pool(url).connection() as conn:
                    usage = {row[0]: PurposeUsage(*row[1:]) for row in summaries_db.model_usage_by_purpose(conn)}
                    summarized = summaries_db.summarized_session_days(conn)
                    sizes = schema_db.table_sizes(conn)
                    messages = transcripts_db.row_counts(conn, ["messages"])["messages"]
                # a stage's time: its longest shard's
                stages = {}
                for ran in runs:
                    for stage, spent in _stage_seconds(ran.run_id).items():
                        stages[stage] = max(stages.get(stage, 0.0), spent)
                idle = bookkeeping_seconds(keys) if bookkeeping else None
                alone = embedder_alone(url, run, loading)
        finally:
            if server is not None:
                server.close()
            close_pools()
    return DistillBench(
        backend="ollama (instant server)" if cost else "rules (offline)",
        users=stats.users, sessions=stats.sessions, messages=messages, days=len(keys), days_with_data=days_with_data,
        seconds=seconds,
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        stage_seconds=stages, table_bytes=sizes,
        usage=usage, summarized_session_days=summarized,
        bookkeeping_seconds=idle, shards=settings.shards, executor=executor, database=load[0], embedder=alone,
    )


def _embedder_load_seconds(settings: Settings) -> float:
    """Load the run's embedder (a local model once per process, which every run and search
    in it reuse) before the run, timed apart: set-up, not the run's work."""
    started = time.perf_counter()
    build_embedder(embed_config(settings)).close()
    return time.perf_counter() - started


def embedder_alone(url: str, settings: Settings, load_seconds: float) -> EmbedderRate:
    """The run's embedder on every distinct text the run embedded, timed alone (after the run, in this
    process: a local model is loaded once per process, so it is warm)."""
    rows = embeddings.texts_embedded(get_pool(url))
    texts = list(dict.fromkeys(rows))
    embedder = build_embedder(embed_config(settings))
    try:
        embedder.embed(texts[:1])  # a remote embedder connects, a local one is loaded
        started = time.perf_counter()
        embedder.embed(texts)
        seconds = time.perf_counter() - started
        return EmbedderRate(embedder.model_id, len(rows), len(texts), embedder.count_tokens(texts), seconds,
                            load_seconds)
    finally:
        embedder.close()


def run_backfill_benchmark(users: int, sessions: int, seed: int, short_days: int, long_days: int,
                           settings: Settings, *, echo: Callable[[str], None] = print) -> BackfillBench:
    """The same generated users and sessions spread over `short_days` and over `long_days`
    (each ending yesterday), each range distilled as one run in a fresh database: what a
    long backfill costs beyond its data."""
    runs = []
    for days in (short_days, long_days):
        config = GeneratorConfig(users=users, sessions=sessions, seed=seed, days=days,
                                 start=date.today() - timedelta(days=days))
        runs.append(run_distill_benchmark(config, settings, cost=False, bookkeeping=True, echo=echo))
    return BackfillBench(*runs)


def evidence_database(users: int, seed: int, embedder_id: str, settings: Settings, *, year_users: int = 7,
                      rebuild: bool = False, echo: Callable[[str], None] = print) -> tuple[str, EvidenceSet]:
    """The labelled evidence set distilled by the whole graph into a database of its own
    (`memory_bench_evidence_…`, named after the set and the embedder), built once and reused
    while what it was built from matches. Its days are run as one range."""
    name = re.sub(r"[^a-z0-9]+", "_",
                  f"memory_bench_evidence_u{users}_y{year_users}_s{seed}_{embedder_id}".lower())[:63]
    folder = settings.home / "bench" / name
    written = write_evidence_set(folder, users=users, seed=seed, year_users=year_users)
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(folder.rglob("*.json*")))).hexdigest()
    params = {"users": users, "year_users": year_users, "seed": seed, "embedder": embedder_id, "set": digest}
    server = resolve_url(settings.database_url, settings.home)

    def distill(url: str) -> None:
        echo(f"building {name}: {written.messages:,} messages of {written.users} users through the whole graph")
        ensure_dagster_home(settings.home, url, max_concurrent_runs=settings.max_concurrent_runs)
        found = inventory_of(str(written.transcripts))
        run_range(partition_keys_between(found.first_day.isoformat(), found.last_day.isoformat()),
                  replace(settings, database_url=url, transcripts=str(written.transcripts)),
                  echo=lambda line: echo(line) if line.startswith("[") else None)
        close_pools()

    url, reused, seconds = reused_or_built(server, name, params, distill, rebuild=rebuild, progress=echo)
    if reused:
        echo(f"reusing {name} (built in {seconds:.0f} s)")
    return url, written

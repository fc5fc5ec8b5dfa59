"""`memory-pipelines bench ingest`: the `transcripts` asset over a large generated source
(about 2 GB of JSON Lines, 5M messages over a year, a file per day), from a local folder and
from an S3 server on 127.0.0.1: peak resident memory and messages/s of one day's
materialization and of one run over the whole range.

Each measurement runs in a process of its own (`python -m assets.bench.ingest WORKER_ARGS`),
whose peak resident set the parent reads from `wait4`, so one scenario's memory never counts
against another's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from memory_pipelines.config import Settings
from memory_pipelines.generator import DayFilesConfig, write_day_files
from memory_pipelines.ports import free_port

BENCH_DATABASE = "memory_bench_ingest"
BUCKET = "memory-bench-ingest"


@dataclass(frozen=True)
class IngestRun:
    source: str  # local or s3
    scenario: str
    messages: int  # stored
    read: int
    file_reads: int
    files_indexed: int
    seconds: float
    peak_rss_mb: float

    @property
    def messages_per_s(self) -> float:
        return self.read / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class IngestBench:
    messages: int
    days: int
    source_bytes: int
    runs: tuple[IngestRun, ...]

    def to_json(self) -> dict:
        return {**asdict(self), "runs": [{**asdict(r), "messages_per_s": r.messages_per_s} for r in self.runs]}


def ingest_markdown(result: IngestBench) -> str:
    lines = [f"{result.messages:,} generated messages over {result.days} days, "
             f"{result.source_bytes / 1e9:.2f} GB of JSON Lines (a file per day)", "",
             "| source | run | records read | stored | files indexed | files read | seconds | records/s | peak RSS MB |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r.source} | {r.scenario} | {r.read:,} | {r.messages:,} | {r.files_indexed:,} | {r.file_reads:,} | "
              f"{r.seconds:.1f} | {r.messages_per_s:,.0f} | {r.peak_rss_mb:,.0f} |" for r in result.runs]
    return "\n".join(lines)


def _worker(location: str, url: str, first: str, last: str, endpoint: str | None) -> dict:
    """In the measured process: the `transcripts` asset over [first, last] as one run."""
    import dagster as dg

    from assets.location import use_settings
    from assets.partition_start import fixed_start
    from memory_pipelines.config import load

    use_settings(fixed_start(load()))  # the run's database is the benchmark's own, not the one the partitions would start from
    from assets.resources import PostgresResource, TranscriptSourceResource
    from assets.ingestion import transcripts

    resources = {"postgres": PostgresResource(database_url=url),
                 "transcript_source": TranscriptSourceResource(location=location, s3_endpoint_url=endpoint)}
    tags = {} if first == last else {"dagster/asset_partition_range_start": first,
                                     "dagster/asset_partition_range_end": last}
    started = time.perf_counter()
    result = dg.materialize([transcripts], resources=resources, instance=dg.DagsterInstance.ephemeral(),
                            partition_key=first if first == last else None, tags=tags,
                            run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}})
    seconds = time.perf_counter() - started
    # a range's totals are on its last day's materialization
    meta = {k: v.value for k, v in result.asset_materializations_for_node("transcripts")[-1].metadata.items()}
    return {"seconds": seconds, **{k: meta[k] for k in ("read", "stored", "file_reads", "files_indexed")}}


def _measure(source: str, scenario: str, location: str, url: str, first: str, last: str,
             endpoint: str | None, credentials: dict[str, str]) -> IngestRun:
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen([sys.executable, "-m", "assets.bench.ingest", json.dumps(
            {"location": location, "url": url, "first": first, "last": last, "endpoint": endpoint})], stdout=out,
            env=os.environ | credentials)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"the {source} {scenario} run failed (exit {proc.returncode})")
        out.seek(0)
        found = json.loads(out.read().strip().splitlines()[-1])
    return IngestRun(source, scenario, found["stored"], found["read"], found["file_reads"], found["files_indexed"],
                     found["seconds"], usage.ru_maxrss / 1024)


@contextmanager
def _s3_copy(folder: Path) -> Iterator[tuple[str, str, dict[str, str]]]:
    """The source uploaded to a moto S3 server on 127.0.0.1 (a test dependency): (location,
    endpoint, the credentials' variables)."""
    import httpx
    from pyarrow import fs

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        writer = fs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", access_key="bench",
                                 secret_key="bench", region="us-east-1", allow_bucket_creation=True)
        writer.create_dir(BUCKET)
        for path in sorted(folder.rglob("*.jsonl")):
            with writer.open_output_stream(f"{BUCKET}/{path.relative_to(folder).as_posix()}") as stream:
                stream.write(path.read_bytes())
        credentials = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}
        # what the measured processes read the bucket with
        yield f"s3://{BUCKET}", endpoint, credentials
    finally:
        server.terminate()
        server.wait(timeout=30)


def run_ingest_benchmark(config: DayFilesConfig, settings: Settings, *, s3: bool = True,
                         echo: Callable[[str], None] = print) -> IngestBench:
    from memory_pipelines.bench.database import fresh_database
    from memory_pipelines.db.connection import close_pools, get_pool

    first, last = config.start.isoformat(), (config.start + timedelta(days=config.days - 1)).isoformat()
    middle = (config.start + timedelta(days=config.days // 2)).isoformat()
    runs: list[IngestRun] = []
    with tempfile.TemporaryDirectory(prefix="memory-bench-ingest-") as folder:
        stats = write_day_files(Path(folder), config)
        size = sum(p.stat().st_size for p in Path(folder).rglob("*.jsonl"))
        echo(f"generated {stats.messages:,} messages in {stats.files} files, {size / 1e9:.2f} GB")
        sources = [("local", folder, None, {})]
        with _s3_copy(Path(folder)) if s3 else _no_s3() as uploaded:
            if uploaded is not None:
                sources.append(("s3", *uploaded))
            for source, location, endpoint, credentials in sources:
                url = fresh_database(settings, BENCH_DATABASE)
                get_pool(url)  # migrated before anything is measured
                close_pools()
                for scenario, a, b in (("one day, first run (indexes every file)", middle, middle),
                                       ("one day, index kept", first, first),
                                       ("whole range, one run", first, last)):
                    if scenario.startswith("whole"):
                        url = fresh_database(settings, BENCH_DATABASE)
                        get_pool(url)
                        close_pools()
                    runs.append(_measure(source, scenario, location, url, a, b, endpoint, credentials))
                    echo(ingest_markdown(IngestBench(stats.messages, config.days, size, (runs[-1],))).splitlines()[-1])
    return IngestBench(stats.messages, config.days, size, tuple(runs))


@contextmanager
def _no_s3() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    print(json.dumps(_worker(args["location"], args["url"], args["first"], args["last"], args["endpoint"])))

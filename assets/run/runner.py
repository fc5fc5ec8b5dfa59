"""Running the whole asset graph in-process over a range of days, as one run, for the CLI."""

import json
import logging
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import date
from functools import partial
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import dagster as dg
import psycopg
import sqlalchemy.exc
from dagster._core.storage.dagster_run import NOT_FINISHED_STATUSES

from tqdm import tqdm

from assets.materialization import STOPPED_BEFORE_STEP
from assets.partitions import SHARD_TAG, SHARDS, TRANSIENT_RETRIES, daily_partitions, partition_key
from assets.location import use_settings
from memory_pipelines.config import MANAGED_MARK, SPECS, Settings, dagster_home, handed_off
from memory_pipelines.db import schema as schema_db
from memory_pipelines.interrupts import deferred_stop
from memory_pipelines.shards import Shard
from memory_pipelines.stages.common import progress_bars
from memory_pipelines.stages.transcripts import TranscriptCounts

DAGSTER_SCHEMA = "dagster"

INSTANCE_TEMPLATE = Path(__file__).with_name("dagster_instance.yaml")

PARTITION_TAG = "dagster/partition"
PLANNED_EVENTS_SWITCH = "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"
EVENT_BATCH_SWITCH = "DAGSTER_EVENT_BATCH_SIZE"
EVENT_BATCH_SIZE = 1000


def _postgres_storage(url: str) -> str:
    """Run, event and schedule storage on the pipeline's own PostgreSQL, each holding its
    connection (`assets.run.storage.HeldPostgresStorage`). The URL is written
    out (JSON is valid YAML) so that any process on this DAGSTER_HOME, `dagster dev` started
    by hand too, finds it; the file is then readable by its owner only."""
    return (f"\nstorage:\n  custom:\n    module: assets.run.storage\n    class: HeldPostgresStorage\n"
            f"    config:\n      postgres_url: {json.dumps(url)}\n")


def _run_queue(max_concurrent_runs: int) -> str:
    """The queued run coordinator: at most MEMORY_MAX_CONCURRENT_RUNS runs at once, and one
    run per shard (tag memory/shard), so a shard's days go in order while shards run side by
    side."""
    return ("\nrun_coordinator:\n  module: dagster.core.run_coordinator\n  class: QueuedRunCoordinator\n"
            f"  config:\n    max_concurrent_runs: {max_concurrent_runs}\n"
            f"    tag_concurrency_limits:\n      - key: {json.dumps(SHARD_TAG)}\n"
            "        value:\n          applyLimitPerUniqueValue: true\n        limit: 1\n")


def dagster_storage_url(database_url: str) -> str:
    """The pipeline's database URL with Dagster's tables kept in their own schema."""
    parts = urlsplit(database_url)
    # psycopg2, the driver dagster-postgres is written for: SQLAlchemy 2.1 would otherwise
    # pick psycopg 3, whose server-side binding breaks Dagster's `NOTIFY run_events, %s`
    scheme = "postgresql+psycopg2"
    params = parse_qsl(parts.query, keep_blank_values=True)
    options = " ".join([v for k, v in params if k == "options"] + [f"-csearch_path={DAGSTER_SCHEMA}"])
    query = urlencode([(k, v) for k, v in params if k != "options"] + [("options", options)])
    return urlunsplit(parts._replace(scheme=scheme, query=query))


def ensure_dagster_home(home: Path, database_url: str | None = None, *,
                        max_concurrent_runs: int = SPECS["MEMORY_MAX_CONCURRENT_RUNS"].default) -> Path:
    """DAGSTER_HOME (default: MEMORY_HOME/dagster) with an instance config that has telemetry
    off and keeps Dagster's runs and events on the pipeline's PostgreSQL (schema `dagster`):
    the server of MEMORY_DATABASE_URL or the embedded one. A dagster.yaml without our mark is
    the user's own and left alone."""
    folder = dagster_home(home)
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "dagster.yaml"
    if not config.exists() or config.read_text(encoding="utf-8").startswith(MANAGED_MARK):
        text = INSTANCE_TEMPLATE.read_text(encoding="utf-8") + _run_queue(max_concurrent_runs)
        if database_url:
            with psycopg.connect(database_url) as conn:  # one transaction: the lock and the schema
                schema_db.create_dagster_schema(conn, DAGSTER_SCHEMA)
            text += _postgres_storage(dagster_storage_url(database_url))
        # written aside and renamed: a process starting at the same moment must never read
        # a half-written file and take it for the user's own
        fd, partial = tempfile.mkstemp(dir=folder, prefix=".dagster.yaml.")  # owner-only
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(partial, config)
    # handed to Dagster: its instance here and the processes it starts find their storage by it
    os.environ["DAGSTER_HOME"] = str(folder)
    # Dagster makes its tables when an instance first opens its storage; two runs (or a run's
    # shard workers) starting at once would both make them, so here, before any run, and on
    # PostgreSQL one process at a time
    with ExitStack() as stack:
        if database_url:
            schema_db.lock_dagster_storage(stack.enter_context(psycopg.connect(database_url)))
        with dg.DagsterInstance.from_config(str(folder)) as instance:
            instance.get_runs(limit=1)
    # One "materialization planned" event per asset for a ranged run instead of one per asset
    # and day (each its own commit: 4 of the 6.8 minutes of a 722-day run went there). The
    # days a run materializes still show materialized; a failed ranged run's days show missing
    # rather than failed (the run itself shows failed, `run` names the days). Set it to 0 for
    # per-day failed status.
    os.environ.setdefault(PLANNED_EVENTS_SWITCH, "1")
    # A ranged run's materializations (one per asset and day) written in batches: PostgreSQL's
    # event storage inserts a batch in one statement, where each event alone took a connection
    # and a commit (167 of the 221 s of a 719-day run on SQLite went there).
    os.environ.setdefault(EVENT_BATCH_SWITCH, str(EVENT_BATCH_SIZE))
    return folder


class RunFailed(RuntimeError):
    pass


class RunInterrupted(RuntimeError):
    """A run stopped by SIGINT or SIGTERM after its step in progress; its Dagster run is
    canceled, what its steps committed stays."""

    def __init__(self, keys: Sequence[str], shard: int, signum: int, stopped_before: str | None):
        where = f" before {stopped_before}" if stopped_before else ""
        super().__init__(f"{range_label(keys)}{shard_label(shard)} stopped{where}: what ran is stored; "
                         "run again to finish")
        self.keys, self.shard, self.signum, self.stopped_before = tuple(keys), shard, signum, stopped_before

    def __reduce__(self):  # from a shard's worker process
        return RunInterrupted, (self.keys, self.shard, self.signum, self.stopped_before)


# every run of one `run_range` carries it: the runs a stop signal cancels
INVOCATION_TAG = "memory/invocation"


class _ProgressHandler(logging.Handler):
    """Prints what assets log and the steps that fail, one line each."""

    def __init__(self, echo: Callable[[str], None]):
        super().__init__(logging.INFO)
        self.echo = echo

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "dagster_meta", None) or {}
        event = meta.get("dagster_event")
        step = meta.get("step_key")
        if event is None and step:
            self.echo(f"    {step}: {meta.get('orig_message', record.getMessage())}")
        elif event is not None and event.event_type_value == "STEP_FAILURE":
            failure = event.step_failure_data.user_failure_data
            stopped = failure is not None and failure.description == STOPPED_BEFORE_STEP
            self.echo(f"    {step}: {'not begun (the run was asked to stop)' if stopped else 'FAILED'}")


# a run logs through the progress logger alone (Dagster's console logger prints every event)
PROGRESS_RUN_CONFIG = {"loggers": {"progress": {}}}
# a run launched from the code location has its console logger only: warnings and errors
QUIET_RUN_CONFIG = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def progress_logger(echo: Callable[[str], None]) -> dg.LoggerDefinition:
    @dg.logger(description="one line per asset for the CLI")
    def progress(_init_context):
        log = logging.getLogger("memory_pipelines.progress")
        log.handlers = [_ProgressHandler(echo)]
        log.setLevel(logging.INFO)
        log.propagate = False
        return log

    return progress


@dataclass(frozen=True)
class RangeRun:
    first: str
    last: str
    days: int
    run_id: str
    seconds: float
    read: int  # transcript records the run read, and of them refused
    quarantined: int
    refused_by_reason: Counter
    shard: int = 0
    events_skipped: Counter = field(default_factory=Counter)  # source events that are no turn, by kind
    refusals_resolved: int = 0  # earlier refusals of records the run stored (or whose file refuses none now)


def partition_keys_between(start: str, end: str) -> list[str]:
    keys = daily_partitions.get_partition_keys()
    if start < keys[0]:
        raise ValueError(f"{start} is before the first day there is a partition for, {keys[0]}: set "
                         f"MEMORY_PARTITION_START={start} to run it")
    if end > keys[-1]:
        raise ValueError(f"{end} is after today ({keys[-1]}, UTC), the last day there is a partition for: "
                         "run it once it has come")
    return keys[keys.index(start) : keys.index(end) + 1]


def last_partition_day() -> date:
    """Today (UTC): the last day there is a partition for."""
    return date.fromisoformat(daily_partitions.get_last_partition_key())


def _cause(error) -> str:
    """What went wrong, in the failing code's own words: the innermost error's first line
    (a database error's detail and hint follow it), without the qualified class name
    Dagster's and our errors carry (`package.Error: ...`); a builtin's name (`TypeError:
    ...`) stays, it is part of the meaning."""
    while error.cause is not None:  # the user code's own error, not Dagster's wrapper
        error = error.cause
    text = error.message.strip().splitlines()[0] if error.message.strip() else (error.cls_name or "failed")
    prefix, _, rest = text.partition(": ")
    return rest if rest and "." in prefix and not prefix.count(" ") else text


def first_error(result: dg.ExecuteInProcessResult) -> str:
    """`asset: cause` of the first failed step."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None:
            return f"{event.step_key}: {_cause(event.step_failure_data.error)}"
    return "run failed"


def lost_storage(result: dg.ExecuteInProcessResult) -> bool:
    """Whether a step failed outside its own code because Dagster's storage lost its database
    (a server restart under the run, with storage on MEMORY_DATABASE_URL)."""
    return any(event.is_step_failure and event.step_failure_data.error is not None
               and (event.step_failure_data.error.cls_name or "").endswith("OperationalError")
               for event in result.all_events)


def range_label(keys: Sequence[str]) -> str:
    return f"partition {keys[0]}" if len(keys) == 1 else f"days {keys[0]}..{keys[-1]}"


def shard_label(shard: int) -> str:
    label = Shard(shard, SHARDS).label
    return f" of {label}" if label else ""


def execute_range(job: dg.JobDefinition, keys: Sequence[str], instance: dg.DagsterInstance,
                  echo: Callable[[str], None], shard: int = 0, tags: dict[str, str] | None = None,
                  executor: str = "in_process") -> dg.ExecuteInProcessResult | dg.JobExecutionResult:
    """One run over the consecutive days `keys` (a UI backfill with the single-run policy
    runs the same way), run again with the step retry policy's limits and pauses when
    Dagster's storage lost its database, while creating the run or inside a step: retry
    policies cover only a step's own code. Every stage is idempotent, so a new run starts
    from what the failed one committed."""
    # one day as a partition key, a longer range as the range tags of a single-run backfill;
    # sharded, the keys are the shard's (DAY|SHARD) and the run carries the shard's tag
    first, last = partition_key(keys[0], shard), partition_key(keys[-1], shard)
    tags = dict(tags or {}) | ({SHARD_TAG: str(shard)} if SHARDS > 1 else {})
    if len(keys) > 1:
        tags |= {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
    single = first if len(keys) == 1 else None
    attempt = 0
    while True:
        try:
            result = _execute(job, instance, single, tags, echo, executor)
            if result.success or not lost_storage(result) or attempt >= TRANSIENT_RETRIES.max_retries:
                return result
        except sqlalchemy.exc.OperationalError:
            if attempt >= TRANSIENT_RETRIES.max_retries:
                raise
        attempt += 1
        delay = TRANSIENT_RETRIES.calculate_delay(attempt)
        echo(f"    {range_label(keys)}: Dagster's storage lost its database connection; running them again "
             f"in {delay:.0f}s")
        time.sleep(delay)


def _execute(job: dg.JobDefinition, instance: dg.DagsterInstance, partition: str | None, tags: dict[str, str],
             echo: Callable[[str], None], executor: str) -> dg.ExecuteInProcessResult | dg.JobExecutionResult:
    """One run: in this process, its steps logging as they go; or, with another `executor`
    (MEMORY_EXECUTOR), launched from the code location so that its executor's processes (a
    Dask cluster's workers) rebuild the job from the settings handed to them, each step
    reported as it ends."""
    if executor == "in_process":
        return job.execute_in_process(instance=instance, raise_on_error=False, run_config=PROGRESS_RUN_CONFIG,
                                      partition_key=partition, tags=tags)
    from assets.definitions import location_distill_job

    result = dg.execute_job(dg.reconstructable(location_distill_job), instance=instance,
                            tags=tags | ({PARTITION_TAG: partition} if partition else {}),
                            run_config=QUIET_RUN_CONFIG, raise_on_error=False)
    for event in result.all_events:
        if event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"):
            echo(f"    {event.step_key}: {'done' if event.is_step_success else 'FAILED'}")
    return result


@contextmanager
def _terminal_bar(stage: str, days: int) -> Iterator[Callable[[], None]]:
    """A stage's bar over its days on stderr, shown only on a terminal (a pipe or a log file
    gets the step lines alone)."""
    with tqdm(total=days, desc=f"    {stage}", unit="day", leave=False, disable=None, file=sys.stderr) as bar:
        yield bar.update


@contextmanager
def run_instance() -> Iterator[dg.DagsterInstance]:
    """This DAGSTER_HOME's instance for a run in this process, its storage's held connections
    closed when the run ends."""
    with dg.DagsterInstance.get() as instance:
        yield instance


def run_range(keys: Sequence[str], settings: Settings, echo: Callable[[str], None] = print,
              shard: int = 0) -> RangeRun:
    """Materialize every asset over the consecutive days `keys` in one run (of one shard's
    users, sharded) with `settings`: each stage works through the days in order, so a day
    without data costs little more than Dagster's bookkeeping of it. A failed step fails the
    run (the days a stage committed stay)."""
    use_settings(settings)
    from assets.definitions import all_assets, distill_job
    from assets.resources import resources_from

    defs = dg.Definitions(
        assets=all_assets, jobs=[distill_job], resources=resources_from(settings),
        loggers={"progress": progress_logger(echo)},
    )
    job = defs.resolve_job_def("distill")
    started = time.perf_counter()
    invocation = uuid.uuid4().hex
    with run_instance() as instance, progress_bars(_terminal_bar), handed_off(settings):
        result, signum = _stoppable(partial(execute_range, job, keys, instance, echo, shard, {INVOCATION_TAG: invocation},
                                            settings.executor), instance, invocation, echo)
    if signum is not None and not result.success:
        raise RunInterrupted(keys, shard, signum, _first_failed_step(result))
    if not result.success:
        raise RunFailed(f"{range_label(keys)}{shard_label(shard)} failed at {first_error(result)}")
    # one materialization per day; the range's counts are on its last day's
    last = partition_key(keys[-1], shard)
    ingested = next(m for m in result.asset_materializations_for_node("transcripts") if m.partition == last)
    counts = TranscriptCounts.from_metadata({key: entry.value for key, entry in ingested.metadata.items()})
    sys.stdout.flush()
    return RangeRun(keys[0], keys[-1], len(keys), result.run_id, time.perf_counter() - started,
                    counts.read, counts.quarantined, counts.quarantined_by_reason, shard,
                    counts.events_skipped, counts.refusals_resolved)


def _first_failed_step(result: dg.ExecuteInProcessResult | dg.JobExecutionResult) -> str | None:
    return next((event.step_key for event in result.all_events if event.is_step_failure), None)


def _cancel_runs(instance: dg.DagsterInstance, invocation: str, signum: int) -> None:
    """Mark the invocation's unfinished runs canceling: each step looks at its run's status
    when it begins and does not begin then (the step in progress finishes and commits)."""
    for run in instance.get_runs(dg.RunsFilter(tags={INVOCATION_TAG: invocation},
                                               statuses=list(NOT_FINISHED_STATUSES))):
        if run.status != dg.DagsterRunStatus.CANCELING:
            instance.report_run_canceling(run, f"stopping after the step in progress ({signal.Signals(signum).name})")


T = TypeVar("T")
CANCEL_POLL_SECONDS = 0.2


def _stoppable(work: Callable[[], T], instance: dg.DagsterInstance, invocation: str,
               echo: Callable[[str], None]) -> tuple[T, int | None]:
    """`work` (the invocation's runs) in a thread of its own while this one takes SIGINT and
    SIGTERM: the first cancels the runs after their step in progress; a second stops at once
    (`Interrupted`: the open transaction rolls back). Returns what `work` returned and the
    stop signal received, if any. (Dagster in the main thread would raise the signal inside
    the step in progress, where a step's retry policy may start it again.)"""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as it is
            outcome["error"] = exc

    worker = threading.Thread(target=run, name="memory-pipelines run", daemon=True)
    with deferred_stop() as stop:
        worker.start()
        announced = False
        while worker.is_alive():
            worker.join(CANCEL_POLL_SECONDS)
            if stop.requested:
                if not announced:
                    echo(f"    {signal.Signals(stop.signum).name}: stopping after the step in progress "
                         "(again: at once)")
                    announced = True
                _cancel_runs(instance, invocation, stop.signum)  # again: a run may start after the signal
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"], stop.signum


def _echo_as(prefix: str, line: str) -> None:
    print(f"{prefix}{line}", flush=True)


def _silent(line: str) -> None:
    pass


def _run_shard(keys: Sequence[str], settings: Settings, shard: int, show_steps: bool) -> RangeRun:
    """One shard's run in a worker process (its own Dagster run and pools)."""
    return run_range(keys, settings, partial(_echo_as, f"[shard {shard}] ") if show_steps else _silent, shard)


def run_shards(keys: Sequence[str], settings: Settings, shards: Sequence[int], parallel: int,
               echo: Callable[[str], None] = print, show_steps: bool = True) -> list[RangeRun]:
    """Each shard's run over the days `keys`, `parallel` at a time, each in a process of its
    own (one shard alone runs here), printing its steps' lines unless not `show_steps`.
    Shards never wait on each other; every run is tried, and a failed one is reported once
    the others end."""
    if len(shards) == 1 or parallel == 1:
        ran = []
        for number, shard in enumerate(shards, 1):
            echo(f"[{number}/{len(shards)}] {keys[0]} .. {keys[-1]} ({len(keys)} days, one run){shard_label(shard)}")
            ran.append(run_range(keys, settings, echo if show_steps else _silent, shard))
        return ran
    echo(f"{keys[0]} .. {keys[-1]} ({len(keys)} days): {len(shards)} shard runs, {parallel} at a time")
    ran, failed = [], []
    # each worker defines the assets from `settings` before the task's module imports them
    with ProcessPoolExecutor(max_workers=parallel, mp_context=multiprocessing.get_context("spawn"),
                             initializer=use_settings, initargs=(settings,)) as workers:
        futures = {workers.submit(_run_shard, keys, settings, shard, show_steps): shard for shard in shards}
        for future in as_completed(futures):
            try:
                ran.append(future.result())
            except RunFailed as exc:
                failed.append(str(exc))
    if failed:
        raise RunFailed("; ".join(sorted(failed)))
    return sorted(ran, key=lambda r: r.shard)


def runs_in_progress() -> list[str]:
    """The ids of the distill runs this DAGSTER_HOME's instance has queued or running."""
    instance = dg.DagsterInstance.get()
    return [run.run_id for run in instance.get_runs(
        dg.RunsFilter(job_name="distill", statuses=list(NOT_FINISHED_STATUSES)))]

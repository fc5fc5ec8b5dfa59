"""The steps of a run on a dask.distributed cluster (MEMORY_EXECUTOR=dask): dagster-dask's
executor, with two things it gets wrong for us fixed.

- It names a step's task `JOB.STEP`; Dask treats tasks of the same name as one, so the
  second of two runs at once (two shards) got the first one's results without running.
  Here a task is named by its run too.
- It runs a step whose upstream step failed (the steps only order each other, they pass no
  values); here such a step is skipped, as the in-process executor skips it.

Each step runs in a worker process that rebuilds the code location (so the resources) from
its own environment; what is shipped is the run, its config and an instance reference,
never a connection.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import dask.distributed
from dagster._core.events import DagsterEvent
from dagster_dask.executor import DaskExecutor, get_dask_resource_requirements, query_on_dask_worker

from memory_pipelines.ports import free_port


def _step_on_worker(upstream_events: list[list[DagsterEvent]], *args) -> list[DagsterEvent]:
    """Runs on a worker: the step, unless a step it waits for failed or was skipped (an
    empty event list says so)."""
    if any(not events or any(e.is_step_failure for e in events) for events in upstream_events):
        return []
    return query_on_dask_worker(upstream_events, *args)


class RunScopedDaskExecutor(DaskExecutor):
    def execute(self, plan_context, execution_plan):
        instance = plan_context.instance
        if not instance.is_persistent:
            raise dg.DagsterInvariantViolationError("the dask executor needs a persistent Dagster instance "
                                                    "(DAGSTER_HOME): its workers report to it")
        run_id = plan_context.dagster_run.run_id
        with dask.distributed.Client(self.cluster_configuration["address"]) as client:
            futures = {}
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    upstream = [futures[key] for step_input in step.step_inputs
                                for key in step_input.dependency_keys]
                    futures[step.key] = client.submit(
                        _step_on_worker, upstream, plan_context.reconstructable_job, plan_context.dagster_run,
                        plan_context.run_config, [step.key], instance.get_ref(), execution_plan.known_state,
                        key=f"{run_id}.{step.key}", resources=get_dask_resource_requirements(step.tags))
            step_of = {future.key: key for key, future in futures.items()}
            for future, events in dask.distributed.as_completed(list(futures.values()), with_results=True):
                if not events:
                    yield DagsterEvent.engine_event(
                        plan_context, f"{step_of[future.key]} skipped: a step it depends on failed")
                yield from events


@dg.executor(name="dask", config_schema={"address": dg.Field(str, description="tcp://HOST:PORT of the scheduler")},
             requirements=dg.multiple_process_executor_requirements())
def dask_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    return RunScopedDaskExecutor("existing", {"address": init_context.executor_config["address"]})


@contextmanager
def local_cluster(env: dict[str, str], logs: Path, workers: int = 2) -> Iterator[str]:
    """A dask.distributed scheduler and `workers` single-threaded worker processes on this
    host, each an OS process of its own with `env` (the code location's settings) as its
    environment; yields the scheduler's address. For tests and benchmarks: a deployment
    runs its own cluster."""
    scheduler_port = free_port()
    address = f"tcp://127.0.0.1:{scheduler_port}"
    dask_command = str(Path(sys.executable).with_name("dask"))
    logs.mkdir(parents=True, exist_ok=True)
    procs = [subprocess.Popen([dask_command, "scheduler", "--host", "127.0.0.1", "--port", str(scheduler_port),
                               "--no-dashboard"], env=env, stdout=subprocess.DEVNULL,
                              stderr=open(logs / "dask-scheduler.log", "w"), start_new_session=True)]
    try:
        procs.append(subprocess.Popen(
            [dask_command, "worker", address, "--nworkers", str(workers), "--nthreads", "1", "--no-dashboard"],
            env=env, stdout=subprocess.DEVNULL, stderr=open(logs / "dask-workers.log", "w"), start_new_session=True))
        deadline = time.monotonic() + 120
        with dask.distributed.Client(address, timeout=60) as client:
            while len(client.scheduler_info()["workers"]) < workers:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"dask workers did not start: see {logs / 'dask-workers.log'}")
                time.sleep(0.5)
        yield address
    finally:
        for proc in reversed(procs):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)

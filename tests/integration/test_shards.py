"""User shards end to end: the sample distilled in shards, side by side, killed and run again,
and re-sharded, ends with the tables of the unsharded run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psycopg
import pytest

from assets.run.dask_executor import local_cluster
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.shards import shard_of
from tests.helpers import ENTRY, location_days, memory_differences

pytestmark = pytest.mark.slow


def _env(url: str, tmp_path, shards: int, **extra: str) -> dict:
    # set here, not inherited: the module's reference is built before the per-test settings apply
    return {**os.environ, "MEMORY_DATABASE_URL": url, "MEMORY_SHARDS": str(shards), "MEMORY_EMBED_BACKEND": "hashing",
            "MEMORY_HOME": str(tmp_path / "home"), "DAGSTER_HOME": str(tmp_path / f"dagster-{shards}"), **extra}


def _cli(env: dict, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENTRY), *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def unsharded(make_module_database, tmp_path_factory) -> str:
    """The sample distilled by the CLI in one run of every user: what sharded runs must equal."""
    url = make_module_database()
    done = _cli(_env(url, tmp_path_factory.mktemp("unsharded"), 1), "run")
    assert done.returncode == 0, done.stderr
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM memory_facts").fetchone()[0] > 0
    return url


def test_sql_and_python_put_every_user_in_the_same_shard(database_url):
    users = [f"user-{i}" for i in range(200)] + ["bob", "alice", "ünïcode-ユーザー"]
    with psycopg.connect(database_url) as conn:
        for shards in (1, 2, 3, 7):
            in_sql = conn.execute("SELECT array_agg(memory_shard(u, %s) ORDER BY n) FROM unnest(%s::text[]) "
                                  "WITH ORDINALITY AS x(u, n)", (shards, users)).fetchone()[0]
            assert in_sql == [shard_of(u, shards) for u in users]
        # a row of no user (a global knowledge entry) belongs to shard 0
        assert conn.execute("SELECT memory_shard(NULL, 3)").fetchone()[0] == 0


def test_three_shards_on_a_dask_cluster_build_the_unsharded_tables(unsharded, make_database, tmp_path):
    url = make_database()
    env = _env(url, tmp_path, 3)
    with local_cluster(env, tmp_path) as address:
        done = _cli({**env, "MEMORY_EXECUTOR": "dask", "MEMORY_DASK_SCHEDULER": address}, "run", "--parallel", "3")
    assert done.returncode == 0, done.stderr
    assert "3 shard runs, 3 at a time" in done.stdout and "x 3 shard(s)" in done.stdout
    for shard in range(3):
        assert f"[shard {shard}]     memory_decay: done" in done.stdout
    with psycopg.connect(url) as conn:
        runs = conn.execute("SELECT run_body FROM dagster.runs WHERE status = 'SUCCESS'").fetchall()
        users_per_shard = conn.execute("SELECT count(DISTINCT memory_shard(user_id, 3)) FROM messages").fetchone()[0]
        step_pids = {r[0] for r in conn.execute(
            "SELECT (event::jsonb -> 'dagster_event' -> 'pid') FROM dagster.event_logs "
            "WHERE dagster_event_type = 'STEP_START'")}
    # one run per shard, each covering its shard's whole range; the sample's users fall in all three
    assert len(runs) == 3 and users_per_shard == 3
    assert all('"memory/shard"' in body for (body,) in runs)
    assert len(step_pids) == 2, step_pids  # every step ran in one of the two worker processes
    assert memory_differences(unsharded, url) == []


def test_shard_runs_at_once_a_killed_one_rerun_and_a_reshard_converge(unsharded, make_database, tmp_path):
    url = make_database()
    env = _env(url, tmp_path, 3)
    # shards 0 and 1 at once, each its own process and Dagster run; shard 2 killed mid-way
    first = [subprocess.Popen([str(ENTRY), "run", "--shards", str(s)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for s in (0, 1)]
    victim = subprocess.Popen([str(ENTRY), "run", "--shards", "2"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    for line in victim.stdout:
        if "session_summaries:" in line:  # the summaries of its days are committed, the rest not yet
            os.killpg(victim.pid, signal.SIGKILL)
            break
    victim.wait(timeout=60)
    assert victim.returncode == -signal.SIGKILL
    for proc in first:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
    assert memory_differences(unsharded, url) != []  # shard 2's users are not done yet
    again = _cli(env, "run", "--shards", "2")
    assert again.returncode == 0, again.stderr
    assert memory_differences(unsharded, url) == []

    # another shard count is refused before any run starts, naming the fix
    refused = _cli(_env(url, tmp_path, 2), "run")
    assert refused.returncode == 2
    assert ("MEMORY_SHARDS is 2 but this database is distilled with 3 shard(s)" in refused.stderr
            and "memory-pipelines reshard --shards 2" in refused.stderr), refused.stderr
    # the killed run still shows as started in Dagster's storage: reshard waits for it
    busy = _cli(_env(url, tmp_path, 2), "reshard", "--shards", "2")
    assert busy.returncode == 1 and "1 distill run(s) are queued or running" in busy.stderr, busy.stderr
    resharded = _cli(_env(url, tmp_path, 2), "reshard", "--shards", "2", "--force")
    assert resharded.returncode == 0 and "shards: 3 -> 2" in resharded.stdout, resharded.stderr
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT shards, previous FROM shard_layout").fetchone() == (2, 3)
    rerun = _cli(_env(url, tmp_path, 2), "run", "--parallel", "2")
    assert rerun.returncode == 0, rerun.stderr
    assert memory_differences(unsharded, url) == []  # finished days stay as they are



AUTOMATION_PROBE = """
import json
from datetime import UTC, datetime
import dagster as dg
from assets.definitions import distill_schedule
context = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 10, 5, 12, 15, tzinfo=UTC))
print(json.dumps([[r.partition_key, r.tags, r.run_key] for r in distill_schedule(context)]))
"""


SENSOR_PROBE = """
import json, os
from assets.definitions import transcript_files_sensor
from tests.helpers import sensor_context
requests = transcript_files_sensor(sensor_context(os.environ["MEMORY_DATABASE_URL"]))
print(json.dumps(sorted([r.partition_key, r.tags, r.run_key] for r in requests)))
"""


def test_the_sensor_requests_a_run_per_day_and_shard_tagged_with_it(database_url):
    folder = SAMPLE_TRANSCRIPTS / "bob"
    probe = subprocess.run([sys.executable, "-c", SENSOR_PROBE], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "MEMORY_SHARDS": "2", "MEMORY_TRANSCRIPTS": str(folder)})
    assert probe.returncode == 0, probe.stderr
    requests = json.loads(probe.stdout.splitlines()[-1])
    days = [d.isoformat() for d in location_days(folder)]
    assert days and [(key, tags) for key, tags, _ in requests] == [
        (f"{day}|{shard}", {"memory/shard": str(shard)}) for day in days for shard in range(2)]
    assert len({run_key for _, _, run_key in requests}) == len(requests)


def test_the_schedule_requests_a_run_per_shard_tagged_with_it(tmp_path):
    probe = subprocess.run([sys.executable, "-c", AUTOMATION_PROBE], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "MEMORY_SHARDS": "3"})
    assert probe.returncode == 0, probe.stderr
    requests = json.loads(probe.stdout.splitlines()[-1])
    assert [(key, tags) for key, tags, _ in requests] == [
        (f"2026-10-05|{shard}", {"memory/shard": str(shard)}) for shard in range(3)]
    assert len({run_key for _, _, run_key in requests}) == 3  # one run each, none deduplicated away


def test_a_shards_run_leaves_another_shards_trees_to_that_shards_run(make_database, tmp_path):
    """A run of one shard never builds another shard's trees: the other shard's run may be
    half-way through its session trees, and a scene tree built from half of them would be
    written over the whole one (seen once in a 4-shard benchmark)."""
    url = make_database()
    env = _env(url, tmp_path, 2)
    assert _cli(env, "run", "--parallel", "2").returncode == 0
    with psycopg.connect(url) as conn:
        built = conn.execute("SELECT count(*) FROM memory_tree WHERE tree_kind IN ('scene', 'entity') "
                             "AND memory_shard(user_id, 2) = 1").fetchone()[0]
        assert built > 0
        # shard 1's users lose their scene and entity trees (as `forget` of those trees would)
        conn.execute("DELETE FROM memory_tree WHERE tree_kind IN ('scene', 'entity') AND memory_shard(user_id, 2) = 1")
    assert _cli(env, "run", "--shards", "0").returncode == 0
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM memory_tree WHERE tree_kind IN ('scene', 'entity') "
                            "AND memory_shard(user_id, 2) = 1").fetchone()[0] == 0
    assert _cli(env, "run", "--shards", "1").returncode == 0  # shard 1's own run builds them again
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM memory_tree WHERE tree_kind IN ('scene', 'entity') "
                            "AND memory_shard(user_id, 2) = 1").fetchone()[0] == built

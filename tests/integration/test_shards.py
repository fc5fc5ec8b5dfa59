"""User shards end to end: the sample distilled in shards, side by side, killed and run again,
and re-sharded, ends with the tables of the unsharded run."""

from __future__ import annotations

import os
import signal
import subprocess

import psycopg
import pytest

from memory_pipelines.shards import shard_of
from tests.helpers import ENTRY, memory_differences

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


def test_three_shards_side_by_side_build_the_unsharded_tables(unsharded, make_database, tmp_path):
    url = make_database()
    done = _cli(_env(url, tmp_path, 3), "run", "--parallel", "3")
    assert done.returncode == 0, done.stderr
    assert "3 shard runs, 3 at a time" in done.stdout and "x 3 shard(s)" in done.stdout
    for shard in range(3):  # every shard ran the whole range as one run of its own users
        assert f"[shard {shard}]     transcripts: 2026-10-01..2026-10-14: " in done.stdout
    assert "other_shards" in done.stdout
    with psycopg.connect(url) as conn:
        runs = conn.execute("SELECT count(*) FROM dagster.runs WHERE status = 'SUCCESS'").fetchone()[0]
        users_per_shard = conn.execute("SELECT count(DISTINCT memory_shard(user_id, 3)) FROM messages").fetchone()[0]
    assert runs == 3 and users_per_shard == 3  # the sample's users fall in all three shards
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


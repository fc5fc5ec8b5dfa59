"""`memory-pipelines run` killed with SIGKILL, or with its database going away under it:
nothing half-written is left, and the next run ends with an undisturbed run's tables."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pgserver
import psycopg
import pytest
from psycopg import sql

from assets.definitions import all_assets
from assets.run.runner import ensure_dagster_home
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.db import embedded
from memory_pipelines.db.connection import close_pools
from tests.helpers import ENTRY, content_fingerprints, materialize_partitions, partial_writes

USERS = ("alice", "bob")
DAYS = ["2026-10-01", "2026-10-02"]  # both users have sessions on both days
# A run (both days in one) prints "[1/1] days", then one "    asset: ..." line per asset as it
# finishes.
PROGRESS_LINES = 1 + len(all_assets)
# Kill n picks its moment with seed KILL_SEEDS[n] in the n-th third of the run.
KILL_SEEDS = (5, 14, 9)
RESTART_SEED = 7


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("transcripts")
    for user in USERS:
        shutil.copytree(SAMPLE_TRANSCRIPTS / user, folder / user)
    return folder


@pytest.fixture(scope="module")
def undisturbed(make_module_database, folder) -> dict:
    """The tables of an undisturbed run over the same input: built in-process (the assets
    and default resources the CLI uses, without its start-up time per run)."""
    url = make_module_database()
    materialize_partitions(all_assets, DAYS, url, folder)
    return content_fingerprints(url)


class CliRun:
    """`memory-pipelines run` over the module's days, in its own process group."""

    def __init__(self, folder: Path, env: dict, stderr: Path):
        self.stderr_path = stderr
        with open(stderr, "w") as err:
            self.proc = subprocess.Popen(
                [str(ENTRY), "run", "--transcripts", str(folder), "--start", DAYS[0], "--end", DAYS[-1]],
                env=env, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        self.lines: list[str] = []

    def progress_until(self, count: int) -> str:
        """Reads stdout until the run has printed `count` progress lines; returns the last."""
        while sum(1 for line in self.lines if line.startswith(("[", "    "))) < count:
            line = self.proc.stdout.readline()
            assert line, f"the run ended before progress line {count}:\n" + "\n".join(self.lines)
            self.lines.append(line.rstrip("\n"))
        return self.lines[-1]

    def kill(self) -> None:
        assert self.proc.poll() is None, "the run ended before it could be killed"
        os.killpg(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL

    def finish(self, timeout: float = 300) -> tuple[int, str, str]:
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, "\n".join(self.lines) + out, self.stderr_path.read_text()


@contextmanager
def cli_run(folder: Path, env: dict, stderr: Path) -> Iterator[CliRun]:
    run = CliRun(folder, env, stderr)
    try:
        yield run
    finally:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait(30)
        run.proc.stdout.close()


def cli_env(tmp_path: Path, **extra: str) -> dict:
    # hashing: the embedder the in-process reference uses (and no model load per run);
    # unbuffered, so progress lines arrive as they are printed
    return {**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster"), "MEMORY_EMBED_BACKEND": "hashing",
            "PYTHONUNBUFFERED": "1", **extra}


@pytest.mark.slow
def test_a_run_killed_at_seeded_moments_then_run_again_ends_with_the_undisturbed_tables(undisturbed, folder,
                                                                                        tmp_path):
    """On the embedded server, as a user runs it: each SIGKILL leaves the killed process's pid
    in the server's handle list and its advisory locks with its connections."""
    home = Path(tempfile.mkdtemp(prefix="mp-ft-"))  # short: the server's socket lives in it
    env = cli_env(tmp_path, MEMORY_HOME=str(home))
    env.pop("MEMORY_DATABASE_URL", None)
    killed = []
    try:
        for number, seed in enumerate(KILL_SEEDS):
            rng = random.Random(seed)
            # one kill in each third of the run's progress (never after its last two stages,
            # which could finish first)
            third = (PROGRESS_LINES - 2) / len(KILL_SEEDS)
            line = rng.randint(int(number * third) + 1, int((number + 1) * third))
            with cli_run(folder, env, tmp_path / f"killed-{number}.err") as run:
                after = run.progress_until(line)
                time.sleep(rng.uniform(0, 0.15))  # the kill moment itself, inside the next stage
                run.kill()
            killed.append(run.proc.pid)
            state = embedded.status(home)
            assert run.proc.pid in state.handle_pids  # what a killed process leaves behind
            assert partial_writes(state.url) == {}, f"killed after {after!r}"

        with cli_run(folder, env, tmp_path / "final.err") as run:
            code, out, err = run.finish()
        assert code == 0, err
        assert "done: 2 partition(s)" in out
        state = embedded.status(home)
        assert not set(killed) & set(state.handle_pids)
        assert content_fingerprints(state.url) == undisturbed
        # nothing of the killed runs is left on the server (a backend ends just after its client)
        with psycopg.connect(state.url, autocommit=True) as conn:
            deadline = time.monotonic() + 10
            while True:
                left = conn.execute("SELECT (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'), "
                                    "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
                                    "AND pid <> pg_backend_pid())").fetchone()
                if left == (0, 0) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert left == (0, 0), "advisory locks, client backends"
    finally:
        embedded.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def test_a_process_that_joined_the_embedded_server_starts_it_again_after_a_stop():
    """`db stop` from another shell, or a crash, under a long-lived process (the UI, a test
    session): asking for the server again starts it, rather than handing out its old URL."""
    home = Path(tempfile.mkdtemp(prefix="mp-ft-"))
    try:
        url = embedded.start(home)
        assert embedded.stop(home)
        assert embedded.start(home) == url and embedded.status(home).running
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        embedded.stop(home)
        shutil.rmtree(home, ignore_errors=True)


def _restart_server(pg_home: Path) -> None:
    # pg_ctl restart reuses the server's options: the same socket, so the same URLs
    pgserver.pg_ctl(["-w", "restart", "-m", "fast"], pgdata=embedded.pgdata_dir(pg_home),
                    user="pgserver" if os.geteuid() == 0 else None)


def test_a_database_restart_mid_run_fails_it_cleanly_or_is_retried_and_the_next_run_converges(
        undisturbed, folder, make_database, pg_home, tmp_path):
    """The session's own server restarts under a run without retries, then under the next
    run with the default retry policy. Pools in this process are closed after each restart,
    so the rest of the session reconnects."""
    url = make_database()
    env = cli_env(tmp_path, MEMORY_DATABASE_URL=url)
    rng = random.Random(RESTART_SEED)
    try:
        with cli_run(folder, {**env, "MEMORY_RETRY_MAX": "0"}, tmp_path / "no-retry.err") as run:
            after = run.progress_until(rng.randint(1, 3))  # early: a short run
            time.sleep(rng.uniform(0, 0.15))
            assert run.proc.poll() is None
            _restart_server(pg_home)
            close_pools()
            code, out, err = run.finish()
        # A statement in flight when the server went down fails its step, which says why; the
        # pool checks idle connections before handing them out, so a restart between
        # statements is outlived. Either way nothing is half-written.
        assert code in (0, 1), f"restarted after {after!r}:\n{out}\n{err}"
        if code == 1:
            reasons = [line for line in err.splitlines() if line.startswith("memory-pipelines: error: ")]
            assert len(reasons) == 1 and "Traceback" not in err, err
            assert reasons[0].startswith("memory-pipelines: error: days 2026-10-01..2026-10-02 failed at "), reasons
        assert partial_writes(url) == {}

        with cli_run(folder, env, tmp_path / "retried.err") as run:
            after = run.progress_until(rng.randint(PROGRESS_LINES // 2, PROGRESS_LINES - 2))
            time.sleep(rng.uniform(0, 0.15))
            assert run.proc.poll() is None
            _restart_server(pg_home)
            close_pools()
            code, out, err = run.finish()
        assert code == 0, f"restarted after {after!r}:\n{err}"
        assert partial_writes(url) == {}
        assert content_fingerprints(url) == undisturbed
    finally:
        if not embedded.status(pg_home).running:
            embedded.start(pg_home)
        close_pools()


# Fails the first write of the chosen kind with SQLSTATE 57P01 (admin_shutdown: what a
# restarting server answers), then lets every later one through.
FAIL_ONCE = """
CREATE SEQUENCE dagster.writes_seen;
CREATE FUNCTION dagster.fail_first_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('dagster.writes_seen') = 1 THEN
        RAISE EXCEPTION 'terminating connection due to administrator command' USING ERRCODE = 'admin_shutdown';
    END IF;
    RETURN NEW;
END $$;
"""


@pytest.mark.parametrize("table, writes, when", [
    ("runs", "INSERT", "true"),  # creating the run
    # a check's result, recorded inside its step (the planned rows come with the run)
    ("asset_check_executions", "INSERT OR UPDATE", "NEW.execution_status <> 'PLANNED'"),
], ids=["creating the run", "inside a step"])
def test_a_run_whose_dagster_storage_write_fails_runs_the_partition_again_and_converges(
        table, writes, when, undisturbed, folder, make_database, tmp_path, monkeypatch):
    """Dagster's own storage, on the pipeline's server, fails one write while the run is
    created or inside a step. Retry policies see only a step's own code, so `run` runs the
    partition again, and it ends with the undisturbed tables."""
    url = make_database()
    env = cli_env(tmp_path, MEMORY_DATABASE_URL=url, MEMORY_RETRY_DELAY="0.2")
    monkeypatch.setenv("DAGSTER_HOME", env["DAGSTER_HOME"])
    ensure_dagster_home(tmp_path, url)
    dg.DagsterInstance.get().dispose()  # creates Dagster's tables, as a first run would
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(FAIL_ONCE)
        conn.execute(sql.SQL("CREATE TRIGGER fail_first_write BEFORE {} ON {} FOR EACH ROW WHEN ({}) "
                             "EXECUTE FUNCTION dagster.fail_first_write()").format(
            sql.SQL(writes), sql.Identifier("dagster", table), sql.SQL(when)))
    with cli_run(folder, env, tmp_path / "storage.err") as run:
        code, out, err = run.finish()
    assert code == 0, f"{out}\n{err}"
    assert f"    days {DAYS[0]}..{DAYS[-1]}: Dagster's storage lost its database connection; running them again" in out
    assert partial_writes(url) == {}
    assert content_fingerprints(url) == undisturbed


def _last_run_status(url: str) -> str:
    with psycopg.connect(url) as conn:  # Dagster's run storage, in the pipeline's database
        return conn.execute("SELECT status FROM dagster.runs ORDER BY create_timestamp DESC LIMIT 1").fetchone()[0]


@pytest.mark.slow
def test_a_run_stopped_by_sigint_is_canceled_in_one_line_and_the_next_run_converges(
        undisturbed, folder, make_database, tmp_path):
    """Issue 37: Ctrl-C (or a service manager's SIGTERM) during `run` is a stop, not a failure:
    the step in progress finishes and commits, no later step begins, one line says where it
    stopped, the status is 128 + the signal, the Dagster run is canceled; the next run
    finishes with the tables of a run never interrupted."""
    url = make_database()
    env = cli_env(tmp_path, MEMORY_DATABASE_URL=url)
    # (SIGTERM takes the same path: `memory_pipelines.interrupts`; `ui` is tested with it)
    with cli_run(folder, env, tmp_path / "stopped.err") as run:
        run.progress_until(2)  # "[1/1] …", then the first asset done
        run.proc.send_signal(signal.SIGINT)
        code, out, err = run.finish()
    assert code == 130, f"{out}\n{err}"
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("memory-pipelines: stopped by SIGINT: days 2026-10-01..2026-10-02 stopped before "), err
    assert err.rstrip().endswith(": what ran is stored; run again to finish")
    assert "(the run was asked to stop)" in out
    assert _last_run_status(url) == "CANCELED"
    assert partial_writes(url) == {}
    with cli_run(folder, env, tmp_path / "final.err") as run:
        code, out, err = run.finish()
    assert code == 0, err
    assert content_fingerprints(url) == undisturbed

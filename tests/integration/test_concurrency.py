"""Two runs touching the same day or session at once: their writes never interleave."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
from psycopg import sql

from assets.run.runner import DAGSTER_SCHEMA, ensure_dagster_home
from memory_pipelines.config import MANAGED_MARK
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from tests.helpers import content_fingerprints
from tests.helpers import ENTRY
from tests.integration.test_cli import cli

DAY = "2026-10-01"
SESSION = "s-bob-0001"  # active on DAY


def _run_day(folder, env) -> subprocess.Popen:
    return subprocess.Popen([str(ENTRY), "run", "--transcripts", str(folder), "--start", DAY, "--end", DAY],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _summary_calls(url) -> dict:
    with psycopg.connect(url) as conn:
        return dict(conn.execute("SELECT session_id, count(*) FROM llm_calls WHERE purpose = 'distill' "
                                 "AND status = 'ok' GROUP BY 1").fetchall())


def test_two_runs_of_the_same_day_at_once_leave_the_tables_of_one_run(make_database, monkeypatch, tmp_path):
    folder = tmp_path / "t"
    for user in ("bob", "alice"):
        shutil.copytree(SAMPLE_TRANSCRIPTS / user, folder / user)
    single = make_database()
    monkeypatch.setenv("MEMORY_DATABASE_URL", single)
    alone = cli("run", "--transcripts", str(folder), "--start", DAY, "--end", DAY)
    assert alone.returncode == 0, alone.stderr

    both = make_database()
    env = {**os.environ, "MEMORY_DATABASE_URL": both}
    runs = [_run_day(folder, env), _run_day(folder, env)]
    for run in runs:
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
    assert content_fingerprints(both) == content_fingerprints(single)
    # nothing summarized twice: the second run to take a session's lock finds it done
    assert _summary_calls(both) == _summary_calls(single) != {}


def test_processes_starting_at_once_all_set_up_dagsters_storage_and_config(database_url, tmp_path):
    """What every run does first, by many at the same moment: create Dagster's schema and
    write dagster.yaml. None fails and none reads a half-written file."""
    starters = 8
    config = Path(os.environ["DAGSTER_HOME"]) / "dagster.yaml"
    for _ in range(10):
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(DAGSTER_SCHEMA)))
        at_once = threading.Barrier(starters)

        def start(_):
            at_once.wait()
            ensure_dagster_home(tmp_path, database_url)
            return config.read_text(encoding="utf-8")

        with ThreadPoolExecutor(starters) as pool:
            seen = set(pool.map(start, range(starters)))
        assert len(seen) == 1 and seen.pop().startswith(MANAGED_MARK)
    assert [p.name for p in config.parent.iterdir()] == ["dagster.yaml"]


def test_a_run_waits_for_a_session_another_run_holds(database_url, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder / "bob")
    with psycopg.connect(database_url, autocommit=True) as holder:
        # the lock another run's step would hold while it writes this session
        holder.execute("SELECT pg_advisory_lock(hashtext('memory_pipelines.session'), hashtext(%s))", (SESSION,))
        run = _run_day(folder, os.environ.copy())
        try:
            deadline = time.monotonic() + 120
            waiting = 0
            while time.monotonic() < deadline and not waiting and run.poll() is None:
                waiting = holder.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                         "AND NOT granted").fetchone()[0]
                time.sleep(0.2)
            assert waiting == 1, "the run did not wait for the held session"
            for table in ("conversation_segments", "session_summaries"):
                assert holder.execute(sql.SQL("SELECT count(*) FROM {} WHERE session_id = %s").format(
                    sql.Identifier(table)), (SESSION,)).fetchone()[0] == 0
        finally:
            holder.execute("SELECT pg_advisory_unlock(hashtext('memory_pipelines.session'), hashtext(%s))",
                           (SESSION,))
        _, stderr = run.communicate(timeout=300)
        assert run.returncode == 0, stderr
        assert holder.execute("SELECT count(*) FROM session_summaries WHERE session_id = %s",
                              (SESSION,)).fetchone()[0] == 1

"""Daily partitions start where the data starts: MEMORY_PARTITION_START when set, else the
first transcript day the database knows, else 2024-01-01. The start is read when the code
location loads, so each case loads the definitions in a process of its own (tests/__init__.py
pins the start for the test processes themselves)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, date, datetime
from pathlib import Path

import psycopg
import pytest

from memory_pipelines.config import SAMPLE_TRANSCRIPTS, load
from tests.helpers import ENTRY, free_port, with_database

REPO = Path(__file__).resolve().parent.parent
SETTING = "MEMORY_PARTITION_START"

# what `dagster dev` does with workspace.yaml: import the code location, resolve its assets
LOAD = """
import dagster as dg
from assets.definitions import defs
node = defs.resolve_asset_graph().get(dg.AssetKey("transcripts"))
print(node.partitions_def.get_first_partition_key())
assert defs.resolve_job_def("distill") is not None
"""


def _environment(**values: str | None) -> dict[str, str]:
    """This process's environment without the test pin of the start, with `values` set (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != SETTING}
    for name, value in values.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def load_definitions(**values: str | None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOAD], cwd=REPO, env=_environment(**values), capture_output=True,
                          text=True, timeout=300)


def first_partition(**values: str | None) -> tuple[str, str]:
    """The first partition of the code location loaded with `values`, and what it logged."""
    result = load_definitions(**values)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip().splitlines()[-1], result.stderr


def add_message(url: str, ts: str, session_id: str = "s-1") -> None:
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO messages (session_id, seq, user_id, role, content, ts, content_hash, source_file, "
            "source_line, ingested_run_id) VALUES (%s, 1, 'ann', 'user', 'hello', %s, 'h', 'f.jsonl', 1, 'r')",
            (session_id, ts))


def add_indexed_file(url: str, name: str, *days: date) -> None:
    """A row of the transcript file index, as a run or a sensor tick writes it."""
    epoch = date(1970, 1, 1)
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO transcript_objects (location, name, size, mtime_ns, scan_key, format, records, refused, "
            "undated, days) VALUES ('/t', %s, 1, 1, 'k', 'jsonl', 1, 0, 0, %s)",
            (name, [(d - epoch).days for d in days]))


def test_definitions_load_with_an_empty_database_and_start_at_the_fixed_day(database_url):
    assert first_partition(MEMORY_DATABASE_URL=database_url)[0] == "2024-01-01"


def test_definitions_load_when_no_database_answers(tmp_path):
    # a server that does not answer: the fixed start, and a line saying why
    dead = f"postgresql://nobody@127.0.0.1:{free_port()}/memory"
    start, logged = first_partition(MEMORY_DATABASE_URL=dead)
    assert start == "2024-01-01"
    assert "daily partitions start at 2024-01-01: the first transcript day could not be read" in logged
    # no URL and no embedded server running: loading does not start one
    home = tmp_path / "home"
    assert first_partition(MEMORY_DATABASE_URL=None, MEMORY_HOME=str(home))[0] == "2024-01-01"
    assert not (home / "pgdata").exists()


def test_definitions_load_with_a_database_not_migrated(pg_admin_url):
    name = "t_unmigrated_" + os.urandom(4).hex()
    with psycopg.connect(pg_admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        start, logged = first_partition(MEMORY_DATABASE_URL=with_database(pg_admin_url, name))
        assert start == "2024-01-01" and '"messages" does not exist' in logged
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_definitions_load_starting_at_the_first_transcript_day(database_url):
    # the UTC day of the earliest message (23:30 at UTC-2 is the next day in UTC)
    add_message(database_url, "2026-10-05T10:00:00Z", "s-later")
    add_message(database_url, "2026-10-03T23:30:00-02:00")
    assert first_partition(MEMORY_DATABASE_URL=database_url)[0] == "2026-10-04"
    # a transcript file indexed with an earlier day, not ingested yet: the partitions start there
    add_indexed_file(database_url, "old.jsonl", date(2026, 9, 21), date(2026, 9, 20))
    assert first_partition(MEMORY_DATABASE_URL=database_url)[0] == "2026-09-20"


def test_a_first_day_after_today_starts_the_partitions_today(database_url):
    add_indexed_file(database_url, "future.jsonl", date(2099, 1, 1))
    before = datetime.now(UTC).date().isoformat()
    start = first_partition(MEMORY_DATABASE_URL=database_url)[0]
    assert start in {before, datetime.now(UTC).date().isoformat()}  # today's partition always exists


def test_a_set_partition_start_wins_over_the_data(database_url):
    add_message(database_url, "2026-10-04T08:00:00Z")
    assert first_partition(MEMORY_DATABASE_URL=database_url, MEMORY_PARTITION_START="2026-11-01")[0] == "2026-11-01"
    assert first_partition(MEMORY_DATABASE_URL=database_url, MEMORY_PARTITION_START="2025-02-01")[0] == "2025-02-01"
    # validated like every date setting: one line naming it
    bad = load_definitions(MEMORY_DATABASE_URL=database_url, MEMORY_PARTITION_START="01/10/2026")
    assert bad.returncode != 0
    assert "MEMORY_PARTITION_START='01/10/2026' is not valid: expected a date like 2024-01-01" in bad.stderr


def test_follow_run_moves_an_unset_start_back_to_the_days_a_run_needs(database_url, monkeypatch):
    from assets.partition_start import follow_run

    add_message(database_url, "2026-10-04T08:00:00Z")
    monkeypatch.delenv(SETTING)
    monkeypatch.setenv("MEMORY_DATABASE_URL", database_url)
    unset = load()
    assert follow_run(unset, date(2026, 10, 6)) == unset  # later than the data: nothing to move
    assert follow_run(unset, date(2026, 9, 1)).partition_start == date(2026, 9, 1)
    monkeypatch.setenv(SETTING, "2026-10-02")
    # a set start is the user's: a run of days before it is refused
    assert follow_run(load(), date(2026, 8, 1)).partition_start == date(2026, 10, 2)


def cli(*args: str, **values: str | None) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENTRY), *args], capture_output=True, text=True, env=_environment(**values),
                          timeout=600)


@pytest.mark.slow
def test_run_backfills_transcripts_older_than_the_data_in_the_database(database_url, tmp_path):
    # the database holds a later day: a load now starts the partitions at 2026-10-05
    add_message(database_url, "2026-10-05T08:00:00Z", "s-later")
    assert first_partition(MEMORY_DATABASE_URL=database_url)[0] == "2026-10-05"
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    # days before any the database knows: `run` indexes the folder first, so the start follows it
    ran = cli("run", "--transcripts", str(folder), "--start", "2026-10-01", "--end", "2026-10-02")
    assert ran.returncode == 0, ran.stderr
    assert "partitions:  2026-10-01 .. 2026-10-02 (2 days)" in ran.stdout
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT min(ts)::date FROM messages").fetchone()[0] == date(2026, 10, 1)
    assert first_partition(MEMORY_DATABASE_URL=database_url)[0] == "2026-10-01"
    # days before the data are still refused, naming where the partitions start now
    early = cli("run", "--transcripts", str(folder), "--start", "1999-01-01", "--end", "1999-01-02")
    assert early.returncode == 2
    assert ("1999-01-01 is before the first day there is a partition for, 2026-10-01: set "
            "MEMORY_PARTITION_START=1999-01-01 to run it") in early.stderr
    # a set start is kept: the run refuses the days before it, as it did
    kept = cli("run", "--transcripts", str(folder), MEMORY_PARTITION_START="2026-10-02")
    assert kept.returncode == 2
    assert ("2026-10-01 is before the first day there is a partition for, 2026-10-02: set "
            "MEMORY_PARTITION_START=2026-10-01 to run it") in kept.stderr

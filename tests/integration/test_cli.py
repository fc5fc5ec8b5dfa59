"""The `memory-pipelines` command, run as a user would."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.db import embedded
from tests.helpers import ENTRY, free_port, table_fingerprints


def cli(*args, env=None, timeout=600) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENTRY), *args], capture_output=True, text=True, env=env or os.environ.copy(),
                          timeout=timeout)


def test_entry_point_is_installed():
    assert ENTRY.exists()
    result = cli("--help")
    assert result.returncode == 0 and "run" in result.stdout and "db" in result.stdout


def _sessions_opened(url: str) -> int:
    """Connections made to the database so far, once the closed ones have been counted (the
    statistics of a session arrive when it ends)."""
    seen, deadline = -1, time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            now = conn.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]
            if now == seen:
                return now
            seen = now
            time.sleep(0.5)
    return seen


def test_run_on_a_subset_prints_progress_and_counts(database_url, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    first = cli("run", "--transcripts", str(folder))
    assert first.returncode == 0, first.stderr
    assert "[1/" in first.stdout and "transcripts:" in first.stdout
    with psycopg.connect(database_url) as conn:
        stored = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert stored > 0
    assert "messages" in first.stdout and str(stored) in first.stdout
    # with MEMORY_DATABASE_URL set, Dagster's runs and events live on that server, in their own schema
    dagster_yaml = Path(os.environ["DAGSTER_HOME"]) / "dagster.yaml"
    assert "postgresql+psycopg2://" in dagster_yaml.read_text() and "search_path%3Ddagster" in dagster_yaml.read_text()
    # every process of the instance (a UI backfill's run worker too) holds its storage's connections
    assert "class: HeldPostgresStorage" in dagster_yaml.read_text()
    assert dagster_yaml.stat().st_mode & 0o077 == 0  # it holds the database URL: its owner's only
    with psycopg.connect(database_url) as conn:
        # the whole range is one run, as a UI backfill with the single-run policy
        assert first.stdout.count("[1/1] ") == 1 and " days, one run)" in first.stdout
        assert conn.execute("SELECT count(*) FROM dagster.runs WHERE status = 'SUCCESS'").fetchone()[0] == 1
        assert conn.execute("SELECT count(*) FROM dagster.event_logs").fetchone()[0] > 0
        assert conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public' "
                            "AND table_name IN ('runs', 'event_logs')").fetchone()[0] == 0
    for stage in ("conversation_segments:", "session_summaries:"):
        assert stage in first.stdout
    before = table_fingerprints(database_url)
    sessions_before = _sessions_opened(database_url)
    again = cli("run", "--transcripts", str(folder), "--start", "2026-10-02", "--end", "2026-10-03")
    assert again.returncode == 0, again.stderr
    # Dagster's storage holds its connections through the run instead of connecting for each
    # event it writes (hundreds of connections a run, each a server process started)
    opened = _sessions_opened(database_url) - sessions_before
    assert opened < 100, f"the run opened {opened} connections"
    assert "partitions:  2026-10-02 .. 2026-10-03 (2 days)" in again.stdout
    assert table_fingerprints(database_url) == before
    context = cli("context", "s-bob-0005", "--request", "which port does ledger-api use?", "--json")
    assert context.returncode == 0, context.stderr
    payload = json.loads(context.stdout)
    assert payload["relevance"] == "filtered" and payload["messages"][-1]["content"].endswith("use?")


@pytest.mark.parametrize("args, message", [
    (["run", "--transcripts", "/nonexistent/place"], "transcript path does not exist"),
    (["run", "--start", "2026-10-05", "--end", "2026-10-01"], "is before --start"),
    (["run", "--start", "yesterday"], "--start must be a date"),
    (["run", "--start", "1999-01-01", "--end", "1999-01-02"],
     "1999-01-01 is before the first day there is a partition for, 2024-01-01: set MEMORY_PARTITION_START=1999-01-01"),
    (["run", "--start", "2026-10-01", "--end", "2999-01-02"], "2999-01-02 is after today ("),
])
def test_run_errors_are_one_line_and_non_zero(database_url, args, message):
    result = cli(*args)
    assert result.returncode == 2  # asked for what cannot be done: nothing ran
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_db_url_and_status_with_an_external_database(database_url):
    assert cli("db", "url").stdout.strip() == database_url
    status = cli("db", "status")
    assert status.returncode == 0 and "external" in status.stdout and "vector:   installed" in status.stdout


def _psql_count(url: str, statement: str) -> int:
    from pgserver._commands import POSTGRES_BIN_PATH

    psql = shutil.which("psql") or str(POSTGRES_BIN_PATH / "psql")
    out = subprocess.run([psql, url, "-tAc", statement], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.mark.slow
def test_embedded_default_run_then_psql_then_rerun_identical(tmp_path):
    """The README's first command on the embedded default database, end to end."""
    env = os.environ.copy()
    for unset in ("MEMORY_DATABASE_URL", "MEMORY_EMBED_BACKEND"):
        env.pop(unset, None)
    env["MEMORY_HOME"] = str(tmp_path / "h")
    env["DAGSTER_HOME"] = str(tmp_path / "dagster")
    try:
        first = cli("run", env=env)
        assert first.returncode == 0, first.stderr
        assert "2026-10-01 .. 2026-10-14 (14 days)" in first.stdout
        url = cli("db", "url", env=env).stdout.strip()
        assert url.startswith("postgresql://")
        assert _psql_count(url, "select count(*) from messages") == 655
        # default decay archives nothing the sample just produced (two weeks of conversation)
        assert _psql_count(url, "select count(*) from memory_archive where reason = 'decayed'") == 0
        before = table_fingerprints(url)
        assert cli("run", env=env).returncode == 0
        assert table_fingerprints(url) == before
        found = cli("search", "server port", "--user", "bob", env=env)
        assert found.returncode == 0, found.stderr
        lines = found.stdout.splitlines()
        assert lines[0].startswith('memory_search "server port" (scope=all):')
        assert lines[2].startswith("1. fact #") and lines[3].strip().endswith(": 9090")
        assert "⚠ outdated: a newer statement overrides this" in found.stdout
        assert cli("search", "port", env=env).returncode == 2  # no user, no admin
        port = cli("search", "ledger-api port", "--user", "bob", "--scope", "knowledge", "--k", "10", env=env)
        assert port.returncode == 0, port.stderr
        hits = port.stdout.split("\n\n")[1:]
        assert hits[0].startswith("1. knowledge entry #") and "9090" in hits[0] and "outdated" not in hits[0], hits
        [old] = [h for h in hits if "Do: let's run ledger-api on port 8080" in h]
        assert "⚠ outdated: a newer statement overrides this (ledger-api listens_on 9090)" in old
        bench = cli("bench", "retrieval", "--needles", "--json", env=env)
        assert bench.returncode == 0, bench.stderr
        modes = {m["mode"]: m for m in json.loads(bench.stdout)["modes"]}
        assert set(modes) == {"vector", "text", "hybrid", "tiered", "unified", "text - breadcrumbs",
                              "hybrid - breadcrumbs", "hybrid + facts", "hybrid + summaries",
                              "hybrid + facts + summaries"} and modes["hybrid"]["questions"] >= 20
        assert modes["hybrid"]["recall_at_k"] >= modes["vector"]["recall_at_k"]
        assert modes["unified"]["questions"] == modes["hybrid"]["questions"] and modes["unified"]["recall_at_k"] > 0
        knowledge = cli("search", "ledger-api", "--user", "bob", "--scope", "knowledge", env=env)
        assert knowledge.returncode == 0 and ". knowledge entry #" in knowledge.stdout
        exported = cli("export", "markdown", str(tmp_path / "md"), "--user", "bob", env=env)
        assert exported.returncode == 0, exported.stderr
        files = list((tmp_path / "md").glob("*.md"))
        assert files and all(f.read_text().startswith("---\nkind: ") for f in files)
        outdated = [f.read_text() for f in files if 'status: "outdated"' in f.read_text()]
        assert outdated and all('superseded_by: "ledger-api listens_on 9090"' in text and "8080" in text
                                for text in outdated), outdated
        forgot = cli("forget", "--user", "wei", "--yes", env=env)
        assert forgot.returncode == 0 and "forgot user wei:" in forgot.stdout and "messages" in forgot.stdout
        assert _psql_count(url, "select count(*) from messages where user_id = 'wei'") == 0
    finally:
        cli("db", "stop", env=env)
    assert not embedded.status(Path(env["MEMORY_HOME"])).running


def test_embedded_server_start_stop_and_dead_pid_cleanup(tmp_path):
    home = tmp_path / "h"
    env = os.environ.copy()
    env.pop("MEMORY_DATABASE_URL", None)
    env["MEMORY_HOME"] = str(home)
    try:
        started = cli("db", "start", env=env)
        assert started.returncode == 0 and "running:" in started.stdout, started.stderr
        assert "RuntimeDirWarning" not in started.stderr
        status = cli("db", "status", env=env)
        assert "running, pid" in status.stdout and "pg_trgm:  installed" in status.stdout
        # a process that joins the server and is then killed leaves its pid behind
        victim = subprocess.Popen(
            [sys.executable, "-c",
             "import sys, time; from pathlib import Path; from memory_pipelines.db import embedded; "
             "embedded.start(Path(sys.argv[1])); print('joined', flush=True); time.sleep(60)", str(home)],
            stdout=subprocess.PIPE, text=True, env=env)
        assert victim.stdout.readline().strip() == "joined"
        pids_file = home / "pgdata" / embedded.PIDS_FILE
        assert victim.pid in json.loads(pids_file.read_text())
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        assert cli("db", "start", env=env).returncode == 0
        assert victim.pid not in json.loads(pids_file.read_text())
        stopped = cli("db", "stop", env=env)
        assert stopped.stdout.strip() == "stopped"
        assert not embedded.status(home).running
        assert "stopped" in cli("db", "status", env=env).stdout
        assert cli("db", "stop", env=env).stdout.strip() == "not running"
    finally:
        embedded.stop(home)


@pytest.mark.slow
def test_ui_serves_the_asset_graph_and_stops_on_sigterm(database_url, tmp_path):
    import time

    import httpx

    port = free_port()
    env = os.environ.copy()
    env["DAGSTER_HOME"] = str(tmp_path / "dagster")
    proc = subprocess.Popen([str(ENTRY), "ui", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        nodes = None
        while time.monotonic() < deadline and nodes is None:
            try:
                reply = httpx.post(f"http://127.0.0.1:{port}/graphql", timeout=5,
                                   json={"query": "{ assetNodes { assetKey { path } groupName } }"})
                nodes = reply.json()["data"]["assetNodes"]
            except (httpx.HTTPError, KeyError, ValueError):
                time.sleep(1)
        assert nodes is not None, "the UI did not come up"
        assert {"assetKey": {"path": ["transcripts"]}, "groupName": "ingestion"} in nodes
        assert (tmp_path / "dagster" / "dagster.yaml").read_text().count("enabled: false") == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM  # stopped, in one line (issue 37)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_turns_lists_a_users_turns_by_decay_score_and_names_what_to_fix(make_sample_database, monkeypatch):
    monkeypatch.setenv("MEMORY_DATABASE_URL", make_sample_database())
    listed = cli("turns", "--user", "bob", "--session", "s-bob-0006", "--k", "3")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.startswith("3 of 10 turn(s) of session s-bob-0006 by decay score, as of 2026-")
    assert len(rows) == 3 and all("s-bob-0006#" in r for r in rows)
    assert "cited by instruction" in rows[0] and "120s" in rows[0]  # the turn the instruction was distilled from
    as_json = json.loads(cli("turns", "--user", "bob", "--k", "2", "--json").stdout)
    assert len(as_json["turns"]) == 2 and as_json["turns"][0]["cited_by"]
    for args, message in ((("--user", "nobody"), "nothing is stored for user 'nobody'"),
                          (("--user", "alice", "--session", "s-bob-0006"), "belongs to another user"),
                          (("--user", "bob", "--k", "0"), "--k must be between 1 and 100")):
        failed = cli("turns", *args)
        assert failed.returncode != 0 and message in failed.stderr and len(failed.stderr.strip().splitlines()) == 1


def test_tree_show_prints_bobs_scene_and_session_trees_and_names_what_to_fix(make_sample_database, monkeypatch):
    monkeypatch.setenv("MEMORY_DATABASE_URL", make_sample_database())
    shown = cli("tree", "show", "--user", "bob")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("scene tree of bob: ") and "- month:2026-10" in lines[1]
    assert any("- day:2026-10-09" in line for line in lines) and any("- session:s-bob-0005" in line for line in lines)
    assert any(line.startswith("session tree of s-bob-0005: ") for line in lines)
    assert "alice" not in shown.stdout
    one = cli("tree", "show", "--user", "bob", "--session", "s-bob-0005", "--depth", "1").stdout.splitlines()
    assert one[0].startswith("session tree of s-bob-0005") and len(one) == 3  # the title, the root and its summary
    two = cli("tree", "show", "--user", "bob", "--session", "s-bob-0005", "--depth", "2").stdout.splitlines()
    assert two[:3] == one and len(two) > 3 and two[3].startswith("    - ")  # the root's children, a level in
    forest = cli("search", "ledger-api port", "--user", "bob", "--scope", "raw", "--mode", "forest", "--k", "2")
    assert forest.returncode == 0, forest.stderr
    assert "passage · turn #" in forest.stdout and "   via month:2026-10 › week:2026-10:" in forest.stdout
    refused = cli("search", "port", "--admin", "--mode", "forest")
    assert refused.returncode != 0 and "--mode forest descends one user's trees" in refused.stderr
    entity = cli("tree", "show", "--user", "bob", "--entity", "Ledger-API").stdout.splitlines()
    assert entity[0].startswith("entity tree of Ledger-API (bob): ") and "- year:2026" in entity[1]
    assert any("- relation:" in line for line in entity) and any("ledger-api listens_on 9090" in line for line in entity)
    for args, message in ((("--user", "bob", "--entity", "ledger"), "entities with a tree: ledger-api"),
                          (("--user", "alice", "--session", "s-bob-0005"), "belongs to another user"),
                          (("--user", "bob", "--depth", "0"), "--depth must be at least 1")):
        failed = cli("tree", "show", *args)
        assert failed.returncode != 0 and message in failed.stderr and len(failed.stderr.strip().splitlines()) == 1


def test_fork_merge_and_sessions_from_the_cli_on_the_branched_sample(make_database, monkeypatch, tmp_path):
    from assets.definitions import all_assets
    from memory_pipelines.config import PACKAGE_DIR
    from tests.helpers import materialize_partitions

    url = make_database()
    materialize_partitions(all_assets, ["2026-11-02"], url, PACKAGE_DIR / "sample_data" / "branched")
    monkeypatch.setenv("MEMORY_DATABASE_URL", url)
    made = cli("fork", "s-gina-0001", "--at", "4", "--as", "s-gina-0001-b", "--by", "gina")
    assert made.returncode == 0, made.stderr
    assert "forked s-gina-0001 after turn 4 as s-gina-0001-b (user gina): its own turns start at seq 5" in made.stdout
    listed = cli("sessions", "--user", "gina").stdout.splitlines()
    assert listed[0] == "3 session(s) of gina, 2 of them forks (under their parent)"
    assert listed[1].lstrip().startswith("s-gina-0001 ")
    assert {line.split(" (fork")[0].strip() for line in listed[2:]} == {"└─ s-gina-0001-fly", "└─ s-gina-0001-b"}
    assert any("(fork after turn 6)" in line and "facts with a merge" in line for line in listed)
    assert any("no turns of its own yet" in line for line in listed)
    hidden = cli("search", "Fly.io volume billing_data", "--user", "gina", "--scope", "raw")
    assert hidden.returncode == 0 and "s-gina-0001-fly" not in hidden.stdout
    shown = cli("search", "Fly.io volume billing_data", "--user", "gina", "--scope", "raw", "--include-forks")
    assert "session s-gina-0001-fly" in shown.stdout and "⑂ fork of s-gina-0001 after turn 6" in shown.stdout
    branches = cli("context", "s-gina-0001", "--include-forks", "--limit", "2")
    assert "- s-gina-0001-fly (fork after turn 6): " in branches.stdout and "s-gina-0001-b" in branches.stdout
    assert "Forks of this session" not in cli("context", "s-gina-0001", "--limit", "2").stdout
    dry = cli("merge", "s-gina-0001-fly", "--into", "s-gina-0001", "--mode", "replace", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would merge s-gina-0001-fly turns 7–10 into s-gina-0001 (replace): parent turns "
                                 "7–10, 4 parent turn(s) 7–10 set aside")
    merged = cli("merge", "s-gina-0001-fly", "--into", "s-gina-0001", "--mode", "replace", "--by", "gina")
    assert merged.returncode == 0 and "merged (#" in merged.stdout
    assert "next: memory-pipelines run --start 2026-11-02" in merged.stdout
    again = cli("merge", "s-gina-0001-fly", "--into", "s-gina-0001", "--mode", "append")
    assert again.returncode == 0 and "already merged: #" in again.stdout and "(replace) by gina" in again.stdout
    restored = cli("merge", "s-gina-0001-fly", "--into", "s-gina-0001", "--restore")
    assert restored.returncode == 0 and "4 merged turn(s) removed, 4 set-aside turn(s) back" in restored.stdout
    for args, message in ((("fork", "s-gina-0001-fly", "--as", "x"), "is itself a fork"),
                          (("merge", "s-gina-0001", "--into", "s-gina-0001-fly", "--mode", "append"), "it is no fork"),
                          (("merge", "s-gina-0001-fly", "--into", "s-gina-0001"), "merge needs --mode"),
                          (("merge", "s-gina-0001-fly", "--into", "s-gina-0001", "--restore"), "is in force")):
        failed = cli(*args)
        assert failed.returncode == 2 and message in failed.stderr and len(failed.stderr.strip().splitlines()) == 1


def test_a_record_dated_tomorrow_waits_for_its_day_and_the_rest_runs(database_url, tmp_path):
    """Issue 37: a clock a day ahead of UTC on one machine never refuses the whole source."""
    today = datetime.now(UTC).date()
    records = [{"session_id": "s-zed-1", "user_id": "zed", "seq": seq, "role": role, "content": text,
                "ts": f"{day}T{hour}:00:00Z"}
               for seq, (day, hour, role, text) in enumerate([
                   (today, "00", "user", "which port does the gateway use?"), (today, "00", "assistant", "8443"),
                   (today + timedelta(days=1), "09", "user", "and the admin port?")], start=1)]
    (tmp_path / "zed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    done = cli("run", "--transcripts", str(tmp_path), env={**os.environ, "MEMORY_EMBED_BACKEND": "hashing"})
    assert done.returncode == 0, done.stderr
    assert (f"later:       1 record(s) dated after today: zed.jsonl:3 ({today + timedelta(days=1)}): "
            f"they wait for a run of their day") in done.stdout
    assert f"this run ends today, --end {today}" in done.stdout
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT seq FROM messages ORDER BY seq").fetchall() == [(1,), (2,)]
        assert conn.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0


def test_reading_commands_work_past_a_bad_setting_they_do_not_use_and_json_leaves_nulls_out(make_sample_database,
                                                                                           monkeypatch):
    """Issue 37: quiet by default."""
    monkeypatch.setenv("MEMORY_DATABASE_URL", make_sample_database())
    monkeypatch.setenv("MEMORY_DECAY_THRESHOLD", "7")  # decay's: nothing a search reads
    users = cli("users")
    assert users.returncode == 0 and "bob" in users.stdout, users.stderr
    assert users.stderr.strip() == ("memory-pipelines: warning: MEMORY_DECAY_THRESHOLD='7' is not valid: expected a "
                                    "number from 0 to 1 (0: never by score) (ignored unless `users` needs it)")
    refused = cli("run")
    assert refused.returncode == 2 and "MEMORY_DECAY_THRESHOLD='7' is not valid" in refused.stderr
    monkeypatch.delenv("MEMORY_DECAY_THRESHOLD")
    found = cli("search", "ledger-api port", "--user", "bob", "--json")
    assert found.returncode == 0 and found.stderr == "", found.stderr  # no default announced by a search
    hits = json.loads(found.stdout)["hits"]
    assert hits and all(value is not None for hit in hits for value in hit.values())

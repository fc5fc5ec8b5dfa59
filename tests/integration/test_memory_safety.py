"""Nothing a default or a user's mistake does may lose served memory: wrong input refused
loudly, settings checked before anything runs, a dead model server found in seconds,
archives reversible in bulk, safer everyday commands. Run as a user would, through the
`memory-pipelines` command, against the real embedded server."""

from __future__ import annotations

import json
import os
import shutil
import time

import dagster as dg
import psycopg
import pytest

from assets.definitions import all_assets
from assets.ingestion import transcripts
from assets.resources import ModelResource
from memory_pipelines.config import SAMPLE_BAD_INPUT, SAMPLE_TRANSCRIPTS
from tests.fakes import Fault, FakeModelServer
from tests.helpers import QUIET, free_port, materialize_partitions, pipeline_resources, table_fingerprints
from tests.integration.test_cli import cli

DAY = "2026-10-09"  # bob's port moves from 8080 to 9090 that day


def count(url: str, statement: str, params=None) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute(statement, params).fetchone()[0]


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memory-pipelines: error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def sampled(make_module_sample_database) -> str:
    """The whole sample, distilled, for the tests that read it or refuse to change it."""
    return make_module_sample_database()


@pytest.fixture
def env(sampled) -> dict:
    return {**os.environ, "MEMORY_DATABASE_URL": sampled, "MEMORY_EMBED_BACKEND": "hashing"}


@pytest.mark.parametrize("name, data", [("some.csv", b"session_id,content\ns1,hello\n"),
                                        ("screenshot.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")])
def test_a_file_that_is_no_transcript_is_refused_and_nothing_changes(sampled, env, tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    before = table_fingerprints(sampled)
    result = cli("run", "--transcripts", str(path), env=env)
    assert result.returncode == 2
    line = one_error_line(result)
    assert f"{path} is not a transcript file: accepted are .jsonl or .ndjson" in line and ".parquet" in line
    assert table_fingerprints(sampled) == before  # not one row, not a partition for today


def test_skipped_files_of_a_folder_are_counted_and_listed(env, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    (folder / "notes.csv").write_text("a,b\n")
    (folder / "sessions" / "export.json").write_text("[]")  # a .json array is a transcript kind: read, empty
    result = cli("run", "--transcripts", str(folder), "--start", DAY, "--end", DAY, env=env)
    assert result.returncode == 0, result.stderr
    assert "skipped:     1 file(s) of no transcript kind skipped: notes.csv (accepted: .jsonl" in result.stdout


def test_bad_settings_are_one_line_naming_the_variable_before_anything_runs(sampled, env):
    before = table_fingerprints(sampled)
    for variable, value, accepted in (("MEMORY_DECAY_THRESHOLD", "abc", "a number from 0 to 1"),
                                      ("MEMORY_STALE_MINUTES", "ten", "an integer >= 1"),
                                      ("MEMORY_DECAY_THRESHOLD", "5", "a number from 0 to 1")):
        result = cli("run", env={**env, variable: value})
        assert result.returncode == 2 and result.stdout == ""
        assert one_error_line(result) == \
            f"memory-pipelines: error: {variable}='{value}' is not valid: expected {accepted}" + \
            (" (0: never by score)" if variable == "MEMORY_DECAY_THRESHOLD" else "")
    assert "Dagster" not in result.stderr
    assert table_fingerprints(sampled) == before


def test_config_prints_every_setting_with_its_source_and_masks_secrets(env):
    shown = cli("config", env={**env, "MEMORY_LLM_API_KEY": "sk-very-secret", "MEMORY_DECAY_MIN_AGE_DAYS": "120",
                               "MEMORY_DECAY_TRESHOLD": "0.2"})
    assert shown.returncode == 0, shown.stderr
    rows = {line.split(None, 1)[0]: line.split(None, 2)[1:] for line in shown.stdout.splitlines()}
    assert rows["MEMORY_DECAY_MIN_AGE_DAYS"] == ["120", "environment"]
    assert rows["MEMORY_DECAY_THRESHOLD"] == ["0.5", "default"]
    assert rows["MEMORY_LLM_API_KEY"] == ["***", "environment"] and "sk-very-secret" not in shown.stdout
    assert rows["MEMORY_DATABASE_URL"][1] == "environment"
    assert rows["MEMORY_DECISION_TIMEOUT"] == ["120.0", "derived: as MEMORY_LLM_*"]
    assert rows["MEMORY_EMBED_BACKEND"] == ["hashing", "environment"]
    invalid = cli("config", env={**env, "MEMORY_STALE_MINUTES": "0"})
    [flagged] = [line for line in invalid.stdout.splitlines() if line.startswith("MEMORY_STALE_MINUTES ")]
    assert invalid.returncode == 2 and flagged.split()[1] == "(invalid)"
    assert one_error_line(invalid).endswith("MEMORY_STALE_MINUTES='0' is not valid: expected an integer >= 1")
    typo = cli("users", env={**env, "MEMORY_DECAY_TRESHOLD": "0.2"})
    assert typo.returncode == 0 and "memory-pipelines: warning: MEMORY_DECAY_TRESHOLD is not a memory-pipelines " \
                                    "setting (ignored); did you mean MEMORY_DECAY_THRESHOLD?" in typo.stderr


def test_a_dead_model_server_fails_the_run_in_seconds_naming_it_and_nothing_is_written(database_url):
    dead = f"http://127.0.0.1:{free_port()}"
    env = {**os.environ, "MEMORY_LLM_BACKEND": "ollama", "MEMORY_LLM_BASE_URL": dead}
    started = time.monotonic()
    result = cli("run", env=env)
    elapsed = time.monotonic() - started
    assert result.returncode == 1 and elapsed < 15, elapsed
    assert one_error_line(result) == (f"memory-pipelines: error: model server {dead} unreachable (connection refused); "
                                      "set MEMORY_LLM_BASE_URL or MEMORY_LLM_BACKEND=rules")
    assert count(database_url, "SELECT count(*) FROM messages") == 0
    # the embedder's server too
    result = cli("run", env={**os.environ, "MEMORY_EMBED_BACKEND": "openai", "MEMORY_EMBED_BASE_URL": dead})
    assert one_error_line(result).endswith("set MEMORY_EMBED_BASE_URL or MEMORY_EMBED_BACKEND=hashing")


def test_a_step_whose_model_server_is_dead_fails_once_without_retries(database_url):
    dead = ModelResource(backend="ollama", base_url=f"http://127.0.0.1:{free_port()}", model="m")
    resources = pipeline_resources(database_url, SAMPLE_TRANSCRIPTS, llm=dead)
    result = dg.materialize(all_assets, partition_key="2026-10-01", resources=resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False, run_config=QUIET)
    failures = [e for e in result.all_events if e.is_step_failure]
    # the chat model's first step: the others that use it (memory_facts, memory_tree) come after it and never run
    assert [e.step_key for e in failures] == ["session_summaries"]
    assert not [e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    for failure in failures:
        assert "unreachable (connection refused); set MEMORY_LLM_BASE_URL or MEMORY_LLM_BACKEND=rules" in \
            failure.step_failure_data.user_failure_data.description


def test_a_failed_partition_is_named_with_its_asset_and_cause_without_dagster_class_names(database_url):
    server = FakeModelServer(fail=lambda request, number: Fault(status=400))  # answers, refuses every prompt
    try:
        result = cli("run", "--start", "2026-10-01", "--end", "2026-10-01",
                     env={**os.environ, "MEMORY_LLM_BACKEND": "ollama", "MEMORY_LLM_BASE_URL": server.url,
                          "MEMORY_LLM_RETRIES": "0", "MEMORY_RETRY_MAX": "0"})
    finally:
        server.close()
    line = one_error_line(result)
    assert result.returncode == 1
    assert line.startswith("memory-pipelines: error: partition 2026-10-01 failed at session_summaries: ")
    assert "dagster" not in line.lower() and "Failure" not in line and "HTTP 400" in line


def test_a_run_whose_every_record_is_refused_exits_non_zero_and_keeps_them(database_url, tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "robots.jsonl").write_text("".join(json.dumps(
        {"session_id": "s1", "user_id": "ann", "seq": n, "role": "robot", "content": "beep",
         "ts": "2026-10-03T10:00:00Z"}) + "\n" for n in range(3)))
    result = cli("run", "--transcripts", str(folder))
    assert result.returncode == 1
    assert one_error_line(result) == ("memory-pipelines: error: all 3 record(s) read were refused and quarantined "
                                      "(3 unknown_role): see the quarantine table; nothing was stored")
    assert count(database_url, "SELECT count(*) FROM quarantine WHERE partition_key = '2026-10-03'") == 3


def test_a_location_without_a_readable_time_opens_no_partition(database_url, tmp_path):
    path = tmp_path / "h" / "history.json"
    shutil.copytree(SAMPLE_BAD_INPUT / "broken_history", path.parent)
    result = cli("run", "--transcripts", str(path))
    assert result.returncode == 1
    assert "were refused (1 malformed_json) and quarantined under 'undated': none was read with a time, so no day " \
           "was run; the first: history.json:0: not a valid JSON array" in one_error_line(result)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT partition_key, reason FROM quarantine").fetchall() == [("undated", "malformed_json")]
        assert conn.execute("SELECT to_regclass('dagster.runs')").fetchone()[0] is None  # no run was even set up


def test_unknown_users_sessions_and_scopes_are_said_and_search_shows_ids(env):
    unknown = cli("search", "port", "--user", "zed", env=env)
    assert unknown.returncode == 1 and "nothing is stored for user 'zed'" in one_error_line(unknown)
    assert cli("context", "s-nobody-1", env=env).returncode == 1
    wrong_owner = cli("search", "port", "--user", "alice", "--session", "s-bob-0005", env=env)
    assert "session 's-bob-0005' belongs to another user than 'alice'" in one_error_line(wrong_owner)
    scope = cli("search", "port", "--user", "bob", "--scope", "everything", env=env)
    assert scope.returncode == 2
    assert "invalid choice: 'everything' (choose from 'all', 'facts', 'raw', 'sketches', 'knowledge')" in scope.stderr
    found = cli("search", "ledger-api port", "--user", "bob", env=env)
    assert found.returncode == 0, found.stderr
    ids = [line for line in found.stdout.splitlines() if line[:2].rstrip(".").isdigit()]
    assert ids and all("#" in header.split(" · session")[0] for header in ids), ids
    turn = next(h for h in ids if ". passage" in h).split("#")[1].split()[0]
    assert cli("lineage", "turn", turn, env=env).returncode == 0
    fact = next(h for h in ids if ". fact #" in h).split("#")[1].split()[0]
    shown = cli("lineage", "fact", fact, env=env)
    assert shown.returncode == 0 and "s-bob-" in shown.stdout


def test_users_and_sessions_list_what_is_stored(env):
    users = cli("users", env=env)
    assert users.returncode == 0 and users.stdout.startswith("7 user(s)")
    [bob] = [line for line in users.stdout.splitlines() if line.split()[:1] == ["bob"]]
    assert bob.split()[1:3] == ["8", "144"]  # sessions, messages
    sessions = cli("sessions", "--user", "bob", env=env)
    assert sessions.returncode == 0 and sessions.stdout.startswith("8 session(s) of bob")
    assert "s-bob-0005" in sessions.stdout and "facts extracted" in sessions.stdout
    assert cli("sessions", "--user", "zed", env=env).returncode == 1


def test_forget_lists_first_and_deletes_only_with_yes(sampled, env):
    before = table_fingerprints(sampled)
    refused = cli("forget", "--user", "carol", env=env)  # no terminal to ask at: nothing deleted
    assert refused.returncode == 2 and refused.stdout.startswith("would forget user carol: ")
    assert "  messages " in refused.stdout and "pass --yes to delete" in one_error_line(refused)
    dry = cli("forget", "--user", "carol", "--dry-run", env=env)
    assert dry.returncode == 0 and dry.stdout.splitlines()[-1] == "dry run: nothing deleted"
    assert dry.stdout.splitlines()[0] == refused.stdout.splitlines()[0]
    assert table_fingerprints(sampled) == before
    assert cli("forget", "--user", "zed", "--yes", env=env).returncode == 1


@pytest.mark.slow
def test_archive_lists_and_restores_in_bulk_by_run_dry_run_first(database_url, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    eager = {**os.environ, "MEMORY_DECAY_MIN_AGE_DAYS": "1"}  # old enough after a day: something decays
    days = ("--start", "2026-10-01", "--end", "2026-10-04")  # bob's first three sessions
    # two runs: a run never archives what it stored itself (issue 37); the second archives the first's
    assert cli("run", "--transcripts", str(folder), "--start", "2026-10-01", "--end", "2026-10-02",
               env=eager).returncode == 0
    assert cli("run", "--transcripts", str(folder), *days, env=eager).returncode == 0
    listed = cli("archive", "list", "--reason", "decayed", "--json")
    rows = json.loads(listed.stdout)
    assert rows and {r["reason"] for r in rows} == {"decayed"} and all(r["run_id"] for r in rows)
    run_id = rows[0]["run_id"]
    of_run = [r for r in rows if r["run_id"] == run_id]
    text = cli("archive", "list", "--run", run_id)
    assert text.stdout.startswith(f"{len(of_run)} archived row(s)") and f"run {run_id}" in text.stdout
    before = table_fingerprints(database_url)
    dry = cli("archive", "restore", "--run", run_id)
    assert dry.returncode == 0 and dry.stdout.startswith(f"would restore {len(of_run)} of {len(of_run)}")
    assert "dry run: nothing restored; add --yes to restore these" in dry.stdout
    assert table_fingerprints(database_url) == before
    done = cli("archive", "restore", "--run", run_id, "--yes")
    assert done.returncode == 0 and done.stdout.startswith(f"restored {len(of_run)} of {len(of_run)}")
    ids = [r["source_id"] for r in of_run if r["source_table"] == "knowledge_entries"]
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM memory_archive WHERE run_id = %s", (run_id,)).fetchone()[0] == 0
        back = conn.execute("SELECT count(*) FROM knowledge_entries WHERE id = ANY(%s) AND last_accessed_at IS NOT NULL",
                            (ids,)).fetchone()[0]
    assert back == len(ids)  # brought back by hand: counted as used, so decay keeps them
    assert cli("run", "--transcripts", str(folder), *days, env=eager).returncode == 0
    assert count(database_url, "SELECT count(*) FROM knowledge_entries WHERE id = ANY(%s)", (ids,)) == len(ids)
    assert cli("archive", "restore", "999999", "--yes").returncode == 1
    assert cli("archive", "restore").returncode == 2  # nothing selected


def test_embeddings_status_shows_vectors_per_model_and_search_warns_of_a_switch(env):
    status = cli("embeddings", "status", env=env)
    assert status.returncode == 0 and status.stdout.startswith("configured embedder: hashing:hashing-v1:384")
    [chunks] = [line.split(None, 3) for line in status.stdout.splitlines() if line.strip().startswith("memory_chunks")]
    assert chunks[1] == "hashing:hashing-v1:384" and int(chunks[2]) > 0 and chunks[3] == "configured"
    assert_served_by_text_until_re_embedded({**env, "MEMORY_EMBED_DIM": "64"}, "hashing:hashing-v1:384",
                                            "hashing:hashing-v1:64")


def assert_served_by_text_until_re_embedded(env: dict, stored: str, configured: str) -> None:
    """After a change of embedder: status names both models, and search still finds bob's fact,
    by text, saying so in one line."""
    status = cli("embeddings", "status", env=env)
    assert status.stdout.startswith(f"configured embedder: {configured}"), status.stdout
    assert stored in status.stdout and "another model: the next run re-embeds them" in status.stdout
    found = cli("search", "ledger-api port", "--user", "bob", env=env)
    assert found.returncode == 0 and "1. fact #" in found.stdout  # text still finds it
    assert found.stderr.strip() == (
        f"memory-pipelines: warning: stored vectors were made with {stored}, the configured embedder "
        f"is {configured}: searching by text until `memory-pipelines run` re-embeds them")


def test_a_dagster_run_with_undated_records_quarantines_them_in_its_own_range(database_url, tmp_path):
    path = tmp_path / "h"
    shutil.copytree(SAMPLE_BAD_INPUT / "broken_history", path)
    [result] = materialize_partitions([transcripts], ["2026-10-05"], database_url, path)
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT partition_key, reason FROM quarantine").fetchall() == [("2026-10-05",
                                                                                             "malformed_json")]
    [mat] = result.asset_materializations_for_node("transcripts")
    assert (mat.metadata["read"].value, mat.metadata["quarantined"].value) == (1, 1)


def test_search_serves_passages_within_the_budget_it_is_given(env):
    shown = cli("search", "which port does ledger-api use now", "--user", "bob", "--budget", "1500", env=env)
    assert shown.returncode == 0, shown.stderr
    headers = [line for line in shown.stdout.splitlines() if ". passage · turn #" in line]
    assert headers and all(" · session s-bob-" in h and " · turns " in h and "2026-10-" in h for h in headers)
    [used] = [line for line in shown.stdout.splitlines() if line.startswith("characters used: ")]
    spent = int(used.split()[2])
    assert 0 < spent <= 1500 and used.startswith(f"characters used: {spent} of 1500")
    served = json.loads(cli("search", "which port does ledger-api use now", "--user", "bob", "--budget", "1500",
                            "--json", env=env).stdout)
    assert served["budget"]["used"] == spent == sum(len(h["text"]) for h in served["hits"])
    passages = [h for h in served["hits"] if h["turns"]]
    assert passages and all(h["score"] > 0 and h["session_id"] and h["start_seq"] <= h["end_seq"] for h in passages)
    tokens = json.loads(cli("search", "ledger-api port", "--user", "bob", "--budget-tokens", "100", "--json",
                            env=env).stdout)
    assert tokens["budget"]["unit"] == "tokens" and tokens["budget"]["used"] <= 100


@pytest.mark.slow
def test_the_upgrade_to_the_onnx_default_re_embeds_local_memory_and_search_serves_it_meanwhile(database_url,
                                                                                                tmp_path):
    """Memory embedded by `local` (the default before `onnx` at mixed precision): after the
    upgrade search still finds it, by text, and says so, until the next run re-embeds it;
    nothing is archived."""
    pytest.importorskip("onnxruntime", reason="needs the 'local' extra (the CI test command installs it)")
    pytest.importorskip("sentence_transformers", reason="needs the 'local' extra (the CI test command installs it)")
    upgraded = {key: value for key, value in os.environ.items()
                if key not in ("MEMORY_EMBED_BACKEND", "MEMORY_EMBED_PRECISION")}
    upgraded.update(MEMORY_DATABASE_URL=database_url, MEMORY_HOME=str(tmp_path / "home"))
    folder = SAMPLE_TRANSCRIPTS / "bob"
    first = cli("run", "--transcripts", str(folder), env={**upgraded, "MEMORY_EMBED_BACKEND": "local"})
    assert first.returncode == 0, first.stderr
    facts = count(database_url, "SELECT count(*) FROM memory_facts")
    assert facts > 0
    assert_served_by_text_until_re_embedded(upgraded, "local:all-MiniLM-L6-v2:384",
                                            "onnx:all-MiniLM-L6-v2-mixed8w7:384")
    again = cli("run", "--transcripts", str(folder), env=upgraded)
    assert again.returncode == 0, again.stderr
    status = cli("embeddings", "status", env=upgraded)
    assert "local:all-MiniLM-L6-v2" not in status.stdout and "another model" not in status.stdout, status.stdout
    found = cli("search", "ledger-api port", "--user", "bob", env=upgraded)
    assert found.returncode == 0 and "1. fact #" in found.stdout and found.stderr.strip() == ""
    assert count(database_url, "SELECT count(*) FROM memory_facts") == facts
    assert count(database_url, "SELECT count(*) FROM memory_archive") == 0

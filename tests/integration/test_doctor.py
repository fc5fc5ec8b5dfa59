"""`memory-pipelines doctor` end to end: a line a check, ok / warn / fail with the fix, exit 1 on
a fail; against the test database, a real model server on 127.0.0.1, and broken settings."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from memory_pipelines.doctor import NATIVE_PARTS
from memory_pipelines.ports import free_port
from tests.fakes import FakeModelServer
from tests.helpers import ENTRY


def doctor(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENTRY), "doctor", *args], env=env, capture_output=True, text=True, timeout=300)


def _env(**values: str) -> dict:
    return {**os.environ, "MEMORY_EMBED_BACKEND": "hashing", **values}


def test_a_healthy_install_is_ok_line_by_line(database_url, tmp_path):
    done = doctor(_env(MEMORY_DATABASE_URL=database_url, MEMORY_HOME=str(tmp_path)))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["ok", "settings"], ["ok", "cpu"], ["ok", "database"], ["ok", "database"], ["ok", "disk"], ["ok", "embedder"],
        ["ok", "model"], ["ok", "dagster"], ["ok", "native"]]
    database, selftest = lines[2], lines[3]
    shipped = len(list((Path(__file__).parents[2] / "sql" / "migrations").glob("*.sql")))
    assert "PostgreSQL 18" in database and "vector 0.8" in database
    assert f"{shipped} of {shipped} migrations applied" in database
    assert "probes on a throwaway embedded server" in selftest
    assert "the server of MEMORY_DATABASE_URL is its own build and not tested" in selftest
    assert all(part.module in lines[-1] for part in NATIVE_PARTS)
    # nothing written: the throwaway server is gone, the database is as it was
    assert not list(tmp_path.glob("pgdata"))


def test_each_failure_names_its_fix_and_the_exit_is_1(database_url, tmp_path):
    server = FakeModelServer()  # answers, but serves only the model `instant`
    closed = f"http://127.0.0.1:{free_port()}/v1"
    try:
        done = doctor(_env(MEMORY_DATABASE_URL=database_url, MEMORY_HOME=str(tmp_path),
                           MEMORY_LLM_BACKEND="openai", MEMORY_LLM_BASE_URL=f"{server.url}/v1",
                           MEMORY_LLM_MODEL="qwen2.5:0.5b", MEMORY_DECISION_BACKEND="openai",
                           MEMORY_DECISION_BASE_URL=closed), "--json")
    finally:
        server.close()
    assert done.returncode == 1
    checks = {c["name"]: c for c in json.loads(done.stdout)}
    assert checks["model llm"]["status"] == "warn" and "does not list qwen2.5:0.5b (it lists instant)" in \
        checks["model llm"]["detail"] and checks["model llm"]["fix"] == "set MEMORY_LLM_MODEL to a model it serves"
    assert checks["model decision"]["status"] == "fail" and closed in checks["model decision"]["detail"]
    assert "MEMORY_DECISION_BACKEND=rules" in checks["model decision"]["fix"]
    assert checks["database"]["status"] == "ok"

    unreachable = doctor(_env(MEMORY_DATABASE_URL="postgresql://nobody@/nowhere?host=/nonexistent",
                              MEMORY_HOME=str(tmp_path)))
    assert unreachable.returncode == 1
    [line] = [line for line in unreachable.stdout.splitlines() if line.startswith("fail  database ")]
    assert "cannot connect" in line and "fix: check MEMORY_DATABASE_URL" in unreachable.stdout


def test_a_bad_setting_is_the_first_failure_and_stops_there(tmp_path):
    done = doctor(_env(MEMORY_HOME=str(tmp_path), MEMORY_DECAY_THRESHOLD="7"))
    assert done.returncode == 1
    assert done.stdout.splitlines()[0].startswith("fail  settings           MEMORY_DECAY_THRESHOLD='7' is not valid")
    assert "fix: `memory-pipelines config` lists every setting" in done.stdout
    assert "database" not in done.stdout  # nothing else is read with settings it cannot trust

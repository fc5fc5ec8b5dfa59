"""API writes while a pipeline run writes the same user's memory, and the server as an
operator runs it: a SIGTERM lets an in-flight request finish, `--workers` serves from
several processes."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from tests.fakes import FakeModelServer, Fault, Request, default_answer
from tests.helpers import ENTRY, free_port, start_server
from tests.integration.test_api_http import keys_cli, server_env

# what the pipeline writes for bob, compared between a run with API writes and one without
PIPELINE_ROWS = {
    "facts": "SELECT category, key, value, confidence, merged_into IS NULL FROM memory_facts "
             "WHERE model <> 'api' ORDER BY 1, 2",
    "knowledge": "SELECT kind, title, content, valid_until, version FROM knowledge_entries WHERE model <> 'api' ORDER BY 1, 2, 3",
    "chunks": "SELECT session_id, start_seq, end_seq, content FROM memory_chunks ORDER BY 1, 2",
    "summaries": "SELECT session_id, version, summary FROM session_summaries ORDER BY 1",
}


# bob's first three days: every stage has work, and a run is short enough to make three
DAYS = ("2026-10-01", "2026-10-03")


def rows(url: str, statement: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(statement).fetchall()


def pipeline_rows(url: str) -> dict[str, list[tuple]]:
    return {name: rows(url, statement) for name, statement in PIPELINE_ROWS.items()}


def run_pipeline(env: dict, folder: Path) -> subprocess.Popen:
    return subprocess.Popen([str(ENTRY), "run", "--transcripts", str(folder), "--start", DAYS[0], "--end", DAYS[-1]],
                            env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


@pytest.fixture
def bob(tmp_path) -> Path:
    folder = tmp_path / "transcripts" / "bob"
    folder.mkdir(parents=True)
    shutil.copy(SAMPLE_TRANSCRIPTS / "bob" / "2026-10-week1.jsonl", folder)
    return folder.parent


@pytest.mark.slow
def test_api_writes_during_a_pipeline_run_lose_nothing_of_either(make_database, tmp_path, bob):
    baseline_url = make_database()
    baseline_env = server_env(baseline_url, tmp_path / "baseline")
    baseline = run_pipeline(baseline_env, bob)
    assert baseline.wait(600) == 0, baseline.stdout.read()[-2000:]
    expected = pipeline_rows(baseline_url)
    assert expected["facts"] and expected["knowledge"], "the baseline run stores bob's memory"

    url = make_database()
    home = tmp_path / "concurrent"
    home.mkdir()
    env = server_env(url, home)
    key = keys_cli(env, "create", "--user", "bob", "--name", "writer").stdout.strip()
    server = start_server(["http", "--port", str(free_port())], env, home / "server.log")
    saved, distilled = [], []
    try:
        pipeline = run_pipeline(env, bob)
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
            while pipeline.poll() is None:
                n = len(saved)
                answer = client.post("/v1/facts", json={"category": "api_probe", "key": f"probe_{n}",
                                                        "value": f"zebra quartz probe number {n}"})
                assert answer.status_code == 200, answer.text
                saved.append(f"probe_{n}")
                if n % 5 == 0:
                    stored = client.post("/v1/distill", json={"text": f"I moved to Lisbon, probe {n}. I prefer tea.",
                                                              "mode": "rules", "store": True})
                    assert stored.status_code == 200 and stored.json()["stored"], stored.text
                    distilled.extend(e["title"] for e in stored.json()["entries"])
        output = pipeline.stdout.read()
        assert pipeline.returncode == 0, output[-2000:]
        assert len(saved) >= 3, "the API wrote while the run was in progress"

        assert pipeline_rows(url) == expected, "the pipeline's rows are those of a run without API writes"
        stored_probes = {r[0] for r in rows(url, "SELECT key FROM memory_facts WHERE category = 'api_probe' "
                                                 "AND model = 'api' AND merged_into IS NULL")}
        assert stored_probes == set(saved)
        api_entries = rows(url, "SELECT count(*) FROM knowledge_entries WHERE model = 'api'")[0][0]
        assert distilled and api_entries > 0

        again = run_pipeline(env, bob)
        assert again.wait(600) == 0, again.stdout.read()[-2000:]
        assert pipeline_rows(url) == expected, "a re-run leaves the pipeline's rows as they were"
        assert {r[0] for r in rows(url, "SELECT key FROM memory_facts WHERE category = 'api_probe' "
                                        "AND merged_into IS NULL")} == set(saved), "a re-run keeps the API's facts"
        assert rows(url, "SELECT count(*) FROM knowledge_entries WHERE model = 'api'")[0][0] == api_entries
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
            hits = client.get("/v1/facts", params={"q": "zebra quartz probe"}).json()
        assert any(f["key"].startswith("probe_") for f in hits["facts"]), hits
    finally:
        assert server.stop(), server.output()[-2000:]


def slow_synthesis(request: Request, number: int) -> dict:
    if request.purpose == "synthesize_knowledge":
        return {"entries": [{"kind": "project", "title": "Harbour move", "content": "Moving the team to Harbour.",
                             "seq": 0}]}
    return default_answer(request, number)


def test_sigterm_lets_an_in_flight_request_finish(make_database, tmp_path):
    url = make_database()
    model = FakeModelServer(answer=slow_synthesis,
                            fail=lambda r, n: Fault(delay_s=3) if r.purpose == "synthesize_knowledge" else None)
    env = {**server_env(url, tmp_path), "MEMORY_LLM_BACKEND": "ollama", "MEMORY_LLM_BASE_URL": model.url,
           "MEMORY_LLM_MODEL": "fake-llm", "MEMORY_LLM_RETRIES": "0"}
    key = keys_cli(env, "create", "--user", "bob").stdout.strip()
    server = start_server(["http", "--port", str(free_port())], env, tmp_path / "server.log")
    try:
        answers = []
        request = threading.Thread(target=lambda: answers.append(httpx.post(
            server.url + "/v1/distill", json={"text": "We are moving the team to Harbour.", "store": True},
            headers={"Authorization": f"Bearer {key}"}, timeout=60)))
        request.start()
        while not model.by_purpose("synthesize_knowledge"):
            request.join(0.05)
        assert server.stop(), server.output()[-2000:]  # returns once the process has ended by itself
        request.join(30)
        [answer] = answers
        assert answer.status_code == 200, answer.text
        assert answer.json()["stored"] and answer.json()["entries"][0]["title"] == "Harbour move"
        assert rows(url, "SELECT title FROM knowledge_entries WHERE model = 'api'") == [("Harbour move",)]
        log = server.output()
        assert "Shutting down" in log and "Application shutdown complete" in log, log[-2000:]
        assert "http POST /v1/distill 200" in log
    finally:
        server.stop()
        model.close()


def test_workers_serve_from_several_processes_and_stop_together(make_sample_database, tmp_path):
    url = make_sample_database()
    env = server_env(url, tmp_path)
    key = keys_cli(env, "create", "--user", "bob").stdout.strip()
    server = start_server(["http", "--port", str(free_port()), "--workers", "2"], env, tmp_path / "server.log")
    try:
        # the first worker answers while the second may still be importing on a busy machine
        deadline = time.monotonic() + 120
        while server.output().count("Started server process") < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(lambda i: client.get("/v1/search", params={"q": f"ledger port {i}"}),
                                        range(40)))
        assert [a.status_code for a in answers] == [200] * 40
        assert all(a.json()["hits"] for a in answers)
        log = server.output()
        assert log.count("Started server process") == 2, log[-2000:]
    finally:
        assert server.stop(), server.output()[-2000:]
    assert server.output().count("Application shutdown complete") == 2

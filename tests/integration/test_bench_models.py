"""`memory-pipelines bench models`: every prompt against a model server over real HTTP (the
instant wire-level server here; a real model with the `real_model` marker)."""

from __future__ import annotations

import json
import os

import pytest

from memory_pipelines.bench import models as bench_models
from memory_pipelines.llm import ModelConfig, build_backend
from tests.fakes import FakeModelServer, default_answer
from tests.integration.test_cli import cli


@pytest.fixture
def server():
    fake = FakeModelServer()
    yield fake
    fake.close()


def test_every_prompt_is_sent_once_per_session_and_reported(server):
    done = cli("bench", "models", "--base-url", server.url + "/v1", "--model", "instant", "--sessions", "2", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = {r["purpose"]: r for r in report["purposes"]}
    assert set(rows) == set(bench_models.PURPOSES)
    for purpose, row in rows.items():
        # a session is distilled a summary chunk at a time: a long one takes more than one call
        assert row["calls"] >= 2 if purpose == "distill" else row["calls"] == 2
        assert row["valid_first_try"] == row["calls"] and row["failed"] == 0 and row["meets_target"]
        assert row["input_tokens"] > 0 and row["latency_p95_ms"] >= row["latency_p50_ms"] > 0
    assert rows["distill"]["items_kept"] > 0 and rows["summarize"]["items_kept"] is None
    # the requests were the prompts the report names, each with its schema
    assert sorted({r.purpose for r in server.requests}) == sorted(bench_models.PURPOSES)
    assert all(r.payload["response_format"]["type"] == "json_schema" for r in server.requests)


def test_retried_and_failed_answers_are_counted_apart(server):
    def answer(request, number):
        said = len(request.payload["messages"])
        if request.purpose == "summarize_facts":
            return "not json"  # and not after the retry either: failed
        if request.purpose == "select_relevant" and said == 2:
            return {"relevant": "all"}  # breaks the schema once, then answers
        return default_answer(request, number)

    server.answer = answer
    backend = build_backend(ModelConfig(backend="openai", base_url=server.url + "/v1", model="m", retries=0))
    outcomes = [o for messages in bench_models.sample_sessions(2) for o in bench_models.run_session(backend, messages)]
    rows = {r.purpose: r for r in bench_models.figures(outcomes)}
    assert (rows["select_relevant"].valid_first_try, rows["select_relevant"].valid_after_retry) == (0, 2)
    assert rows["summarize_facts"].failed == 2 and rows["summarize_facts"].valid_rate == 0
    assert rows["summarize"].valid_rate == 1.0
    table = bench_models.markdown(list(rows.values()), "openai/m", 2)
    assert "| summarize_facts | 2 | 0 | 0 | 2 | 0% (below 95 %) |" in table


def test_an_unreachable_server_is_one_line_naming_the_flag():
    done = cli("bench", "models", "--base-url", "http://127.0.0.1:9/v1", "--model", "m")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].endswith("unreachable (connection refused): start it or fix --base-url")


@pytest.mark.real_model
@pytest.mark.skipif(not os.environ.get("MEMORY_TEST_MODEL_URL"), reason="MEMORY_TEST_MODEL_URL names no model server")
def test_a_real_model_answers_every_prompt_by_its_schema():
    """Two sample sessions through every prompt of a real model (MEMORY_TEST_MODEL_URL, an
    OpenAI-compatible server; MEMORY_TEST_MODEL names the model)."""
    done = cli("bench", "models", "--base-url", os.environ["MEMORY_TEST_MODEL_URL"],
               "--model", os.environ.get("MEMORY_TEST_MODEL", "local"), "--sessions", "2", "--json", timeout=3600)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["purposes"]
    assert {r["purpose"] for r in rows} == set(bench_models.PURPOSES)
    # a session is distilled a summary chunk at a time: a long one takes more than one call
    assert all((r["calls"] >= 2 if r["purpose"] == "distill" else r["calls"] == 2)
               and r["valid_first_try"] + r["valid_after_retry"] >= 1 for r in rows), rows

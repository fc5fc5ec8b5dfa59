"""Estimated cost from the price table, and the per-run token budget."""

from __future__ import annotations

import json
import shutil
from datetime import date, timedelta

import psycopg
import pytest

from assets.definitions import all_assets
from assets.distillation import conversation_segments, session_summaries
from assets.ingestion import transcripts
from assets.resources import ModelResource
from memory_pipelines.config import SAMPLE_TRANSCRIPTS, ConfigError, load
from memory_pipelines.llm import ModelConfig
from memory_pipelines.llm.pricing import Price, load_price_table, price_for
from tests.fakes import FakeModelServer
from tests.helpers import (
    AUDIT_COLUMNS, NOT_MEMORY, materialization_metadata, materialize_partitions, pipeline_resources, table_fingerprints,
)

DAYS = [(date(2026, 10, 1) + timedelta(days=i)).isoformat() for i in range(7)]


def rows(url, statement, params=None):
    with psycopg.connect(url) as conn:
        return conn.execute(statement, params).fetchall()


def test_price_table_keys_precedence_and_errors(tmp_path, monkeypatch):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"openai/gpt-x": {"input_usd_per_mtok": 1, "output_usd_per_mtok": 4},
                                "gpt-x": {"input_usd_per_mtok": 9, "output_usd_per_mtok": 9}}))
    table = load_price_table(path)
    assert price_for("openai", "gpt-x", table) == Price(1.0, 4.0)
    assert price_for("ollama", "gpt-x", table) == Price(9.0, 9.0)
    assert price_for("ollama", "other", table) is None and price_for("rules", "rules-v1", {}) == Price(0, 0)
    assert Price(1.0, 4.0).cost(1_000_000, 500_000) == pytest.approx(3.0)
    monkeypatch.setenv("MEMORY_PRICE_TABLE", str(path))
    monkeypatch.setenv("MEMORY_LLM_BACKEND", "openai")
    monkeypatch.setenv("MEMORY_LLM_MODEL", "gpt-x")
    config = ModelConfig.from_settings(load())
    assert (config.input_usd_per_mtok, config.output_usd_per_mtok) == (1.0, 4.0)
    assert config.cost_usd(2000, 1000) == pytest.approx(0.006)
    monkeypatch.setenv("MEMORY_LLM_MODEL", "unpriced")
    assert ModelConfig.from_settings(load()).cost_usd(2000, 1000) is None
    path.write_text(json.dumps({"gpt-x": {"input_usd_per_mtok": "cheap"}}))
    with pytest.raises(ConfigError, match="gpt-x"):
        load_price_table(path)
    monkeypatch.delenv("MEMORY_PRICE_TABLE")
    monkeypatch.setenv("MEMORY_RUN_TOKEN_BUDGET", "-1")
    with pytest.raises(ConfigError, match="BUDGET"):
        ModelConfig.from_settings(load())


def test_every_call_carries_its_estimated_cost_into_metadata_and_the_daily_view(database_url, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "dmitri", folder)
    server = FakeModelServer()
    try:
        priced = ModelResource(backend="ollama", base_url=server.url, model="fake-llm", retries=0, backoff_s=0.0,
                               input_usd_per_mtok=2.0, output_usd_per_mtok=8.0)
        unpriced = ModelResource(backend="ollama", base_url=server.url, model="fake-judge", retries=0, backoff_s=0.0)
        resources = pipeline_resources(database_url, folder, llm=priced, decision=unpriced)
        results = materialize_partitions([transcripts, conversation_segments, session_summaries], DAYS,
                                         database_url, folder, resources=resources)
    finally:
        server.close()
    total = 0.0
    for result in results:
        meta = materialization_metadata(result, "session_summaries")
        [(expected, calls)] = rows(database_url, """
            SELECT coalesce(sum((input_tokens * 2.0 + output_tokens * 8.0) / 1e6), 0), count(*) FROM llm_calls
            WHERE run_id = %s AND asset = 'session_summaries' AND model = 'fake-llm'""", (result.run_id,))
        assert meta["estimated_cost_usd"] == pytest.approx(float(expected), abs=1e-6)
        total += meta["estimated_cost_usd"]
        judged = materialization_metadata(result, "conversation_segments")
        assert judged["unpriced_calls"] == judged["model_calls"]
    assert total > 0
    assert rows(database_url, "SELECT count(*) FROM llm_calls WHERE model = 'fake-llm' AND cost_usd IS NULL")[0][0] == 0
    assert rows(database_url, "SELECT count(*) FROM llm_calls WHERE model = 'fake-judge' AND cost_usd IS NOT NULL"
                )[0][0] == 0
    [(by_view, unpriced_calls)] = rows(database_url, """
        SELECT sum(estimated_cost_usd), sum(unpriced_calls) FROM model_usage_daily WHERE user_id = 'dmitri'""")
    assert float(by_view) == pytest.approx(total, abs=1e-5)
    assert unpriced_calls == rows(database_url, "SELECT count(*) FROM llm_calls WHERE model = 'fake-judge'")[0][0] > 0


def test_a_token_budget_stops_each_run_cleanly_and_the_next_runs_finish_the_work(make_database):
    budget = 2500
    limited, free = make_database(), make_database()
    rules = ModelResource(token_budget=budget)
    resources = pipeline_resources(limited, SAMPLE_TRANSCRIPTS, llm=rules, decision=rules)
    results = materialize_partitions(all_assets, DAYS, limited, SAMPLE_TRANSCRIPTS, resources=resources,
                                     expect_success=False)
    # a budget stop is a model failure: the summaries step fails with the reason, later assets wait
    assert not all(r.success for r in results)
    for result in results:
        if not result.success:
            [failure] = [e for e in result.all_events if e.is_step_failure]
            assert "token budget reached" in failure.step_failure_data.user_failure_data.description
            assert not any(e.event_type_value == "STEP_RESTARTED" for e in result.all_events)  # no retry
    stopped = 0
    for result in results:
        calls = rows(limited, "SELECT input_tokens + output_tokens, status, error FROM llm_calls WHERE run_id = %s "
                              "ORDER BY id", (result.run_id,))
        spent = 0
        for tokens, status, error in calls:
            # a call is made only while the run is under budget; once over, every call fails unsent
            if spent < budget:
                assert status == "ok", error
            else:
                assert status == "error" and error.startswith("token budget reached") and tokens == 0
                stopped += 1
            spent += tokens
    assert stopped > 0
    # what the budget held back is done by later runs without one: the same tables as no budget at all
    materialize_partitions(all_assets, DAYS, limited, SAMPLE_TRANSCRIPTS)
    materialize_partitions(all_assets, DAYS, free, SAMPLE_TRANSCRIPTS)
    assert recovered_state(limited) == recovered_state(free)


# Columns that record when, and in which partition, work was done, and serial ids: a run
# that finishes deferred work changes them by design; everything else must be equal.
DEFERRED = AUDIT_COLUMNS | {"partition_key", "extracted_at", "archived_at", "merged_into", "source_id", "row_data"}
ROW_AUDIT_KEYS = ["id", "run_id", "created_at", "updated_at", "partition_key", "merged_into", "extracted_at"]


def recovered_state(url) -> dict:
    state = table_fingerprints(url, skip_columns=DEFERRED, skip_tables=(*NOT_MEMORY, "llm_calls"))
    state["merges"] = rows(url, "SELECT f.user_id, f.category, f.key, s.key FROM memory_facts f "
                                "JOIN memory_facts s ON s.id = f.merged_into ORDER BY 1, 2, 3")
    state["archived"] = rows(url, "SELECT source_table, reason, (row_data - %s::text[])::text FROM memory_archive "
                                  "ORDER BY 1, 2, 3", (ROW_AUDIT_KEYS,))
    return state

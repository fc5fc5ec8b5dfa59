"""Smoke runs of `bench distill` and `bench cost` on a tiny generated input (benchmarks are
not timed tests: these check that the figures are measured and add up)."""

from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest
from psycopg import sql

from assets.bench.distill import BENCH_DATABASE, run_distill_benchmark
from assets.partition_start import fixed_start
from memory_pipelines.bench.distill import distill_markdown
from memory_pipelines import config
from memory_pipelines.bench.evidence_set import CATEGORIES
from memory_pipelines.bench.retrieval import BUDGETS, EVIDENCE_ROWS
from memory_pipelines.db.connection import with_database
from memory_pipelines.db.queries import query
from memory_pipelines.generator import GeneratorConfig, write_transcripts
from memory_pipelines.stages.embeddings import EMBEDDED_TABLES
from tests.integration.test_cli import cli

TINY = GeneratorConfig(users=3, sessions=6, days=2, seed=7)
STAGES = {"transcripts", "conversation_segments", "session_summaries", "memory_facts", "memory_chunks",
          "knowledge_entries", "memory_embeddings", "memory_decay"}


def test_bench_distill_measures_every_stage_offline(database_url, tmp_path):
    expected = write_transcripts(tmp_path / "t", TINY).messages
    result = run_distill_benchmark(TINY, fixed_start(config.load()), cost=False, echo=lambda line: None)
    assert result.messages == expected > 0
    assert STAGES <= set(result.stage_seconds) and all(s > 0 for s in result.stage_seconds.values())
    assert result.model_calls == 0  # the rules back end is not a model
    assert result.table_bytes["messages"] > 0 and result.peak_rss_mb > 0
    assert result.messages_per_s == result.messages / result.seconds
    # the server's load during the run: its connections, writes and CPU (the embedded server runs here)
    load = result.database
    assert load.connections_peak >= 1 and load.seconds >= result.seconds
    assert load.commits >= TINY.sessions and load.wal_bytes > 0 and load.deadlocks == 0
    assert load.server_cpu_seconds > 0 and load.machine_cpu_seconds >= load.server_cpu_seconds
    # the pipeline's own CPU, this process's (issue 41 item 4: at most the server's offline)
    assert 0 < load.process_cpu_seconds < load.machine_cpu_seconds
    # the sampling's own CPU is the benchmark's, left out of both
    assert 0 < load.sampler_process_cpu_seconds < load.process_cpu_seconds
    assert 0 <= load.sampler_server_cpu_seconds < load.server_cpu_seconds  # ticks of 10 ms: a tiny run may read 0
    assert result.process_to_server_cpu == load.process_cpu_seconds / load.server_cpu_seconds
    assert load.waiting_seconds("Lock") == sum(load.doing_seconds.get("Lock", {}).values())
    # the embedder alone on every text the run embedded (issue 41)
    rate = result.embedder
    with psycopg.connect(with_database(database_url, BENCH_DATABASE)) as conn:
        embedded = sum(conn.execute(sql.SQL("SELECT count(*) FROM {} WHERE embedding IS NOT NULL").format(
            sql.Identifier(table))).fetchone()[0] for table in EMBEDDED_TABLES)
    assert rate.model.startswith("hashing:") and rate.rows == embedded > result.messages / 2
    assert 0 < rate.texts <= rate.rows
    assert rate.tokens > rate.texts and 0 < rate.seconds < result.seconds
    assert result.ratio_to_embedder == result.seconds / rate.seconds > 1
    assert result.embedder_share == pytest.approx(1 / result.ratio_to_embedder)
    figures = result.to_json()
    assert figures["process_to_server_cpu"] == result.process_to_server_cpu
    assert (figures["messages_per_second"], figures["embedder_texts_per_second"], figures["ratio_to_embedder"],
            figures["embedder_share"]) == (result.messages_per_s, rate.texts / rate.seconds, result.ratio_to_embedder,
                                           result.embedder_share)
    table = distill_markdown(result)
    assert "| **whole run** |" in table and "| memory_facts |" in table
    assert f"| commits | {load.commits:,} |" in table
    assert f"| this process's CPU seconds (the pipeline) | {load.process_cpu_seconds:.1f} |" in table
    assert (f"| the sampling's own CPU seconds (left out of the two above) | {load.sampler_process_cpu_seconds:.1f} "
            f"+ {load.sampler_server_cpu_seconds:.1f} |") in table
    assert f"alone on the run's {rate.texts:,} distinct texts (of {rate.rows:,} rows)" in table


def test_the_sampler_names_the_project_lock_a_connection_waits_on(database_url):
    with psycopg.connect(database_url) as holder, psycopg.connect(database_url, autocommit=True) as sampler:
        holder.execute(query("lock_sessions"), {"session_ids": ["s-1"]})
        holder.execute(query("lock_transcript_writes"))

        def wait(name: str, params: dict | None) -> None:
            with psycopg.connect(database_url) as waiter:
                waiter.execute(query(name), params)

        waiters = [threading.Thread(target=wait, args=args) for args in
                   (("lock_transcript_writes", None), ("lock_sessions", {"session_ids": ["s-1"]}))]
        for waiter in waiters:
            waiter.start()
        deadline, seen = time.monotonic() + 20, {}
        while time.monotonic() < deadline and len(seen) < 2:
            seen = {r[1]: r[2] for r in sampler.execute(query("bench_server_activity")) if r[0] == "Lock"}
            time.sleep(0.05)
        holder.rollback()
        for waiter in waiters:
            waiter.join()
    assert seen == {"advisory transcripts": 1, "advisory session": 1}


def test_bench_cost_counts_the_calls_a_model_would_get(database_url):
    done = cli("bench", "cost", "--users", "3", "--sessions", "6", "--days", "2", "--seed", "7", "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    usage = figures["usage"]
    # one distillation call per summarized chunk writes summary, facts and knowledge: no call of their own
    assert {"judge_segments", "distill", "summarize_facts"} <= set(usage)
    assert not {"summarize", "extract_facts", "synthesize_knowledge"} & set(usage)
    assert usage["distill"]["calls"] >= figures["summarized_session_days"]
    assert figures["model_calls"] == sum(u["calls"] for u in usage.values()) > 0
    assert all(u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in usage.values())
    assert figures["calls_per_1000_messages"] == 1000 * figures["model_calls"] / figures["messages"]
    assert 0 < figures["summarized_session_days"] <= figures["sessions"] * figures["days"]
    assert figures["calls_per_session_day"] == figures["model_calls"] / figures["summarized_session_days"]
    distilling = sum(usage[p]["calls"] for p in ("judge_segments", "distill", "find_overturned") if p in usage)
    assert figures["distillation_calls_per_session_day"] == distilling / figures["summarized_session_days"]
    tokens_in = sum(u["input_tokens"] for u in usage.values())
    assert figures["input_tokens_per_1000_messages"] == 1000 * tokens_in / figures["messages"]
    # the sample price table prices the run; its free local model costs nothing
    costs = figures["estimated_cost_usd"]
    assert costs["llama.cpp/local model"]["run"] == 0 < costs["openai/gpt-4o-mini"]["run"] < costs["openai/gpt-4.1"]["run"]


def test_bench_cost_refuses_a_broken_price_table(database_url, tmp_path):
    table = tmp_path / "prices.json"
    table.write_text('{"m": {"input_usd_per_mtok": "free"}}')
    done = cli("bench", "cost", "--users", "1", "--sessions", "1", "--days", "1", "--price-table", str(table))
    assert done.returncode == 2 and "numeric input_usd_per_mtok" in done.stderr


@pytest.mark.slow
def test_bench_retrieval_scores_every_row_set_and_kind_and_reuses_its_database(database_url):
    done = cli("bench", "retrieval", "--users", "1", "--year-users", "1", "--json", timeout=900)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["questions"] == sum(figures["by_category"].values()) == sum(figures["by_set"].values()) > 40
    rows = {(r["row"], r["set"], r["category"]): r for r in figures["rows"]}
    assert {row for row, _, _ in rows} == set(EVIDENCE_ROWS)
    assert {category for _, _, category in rows} == {"all", *CATEGORIES}
    assert {(s, c) for _, s, c in rows if c in ("spread", "person")} == {("year", "spread"), ("year", "person"),
                                                                         ("all", "spread"), ("all", "person")}
    for r in rows.values():
        assert all(0 <= r["recall_at_budget"][str(b)] <= 1 for b in BUDGETS)
        assert 0 <= r["ndcg_at_k"] <= 1 and 0 < r["p50_ms"] <= r["p95_ms"]
    assert rows[("fused, score fusion", "all", "all")]["recall_at_budget"]["7200"] > 0.5
    again = cli("bench", "retrieval", "--users", "1", "--year-users", "1", "--ablations", "--row",
                "unified (the agent's tool)", "--row", "unified - question parts", timeout=900)
    assert "reusing memory_bench_evidence_u1_y1_s0" in again.stderr
    assert "| unified - question parts |" in again.stdout and "| fused, score fusion |" not in again.stdout


@pytest.mark.slow
def test_bench_serve_loads_both_transports_and_revokes_its_key(make_sample_database, monkeypatch):
    url = make_sample_database()
    monkeypatch.setenv("MEMORY_DATABASE_URL", url)
    monkeypatch.setenv("MEMORY_EMBED_BACKEND", "hashing")
    done = cli("bench", "serve", "--clients", "3", "--seconds", "1", "--user", "bob", "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["user"] == "bob" and figures["facts"] > 0 and figures["embedder"] == "hashing/hashing-v1"
    loads = {t["transport"]: t for t in figures["transports"]}
    assert set(loads) == {"http", "mcp"}
    for load in loads.values():
        assert load["requests"] > 0 and load["errors"] == 0, load["error_examples"]
        assert load["latency"]["n"] == load["requests"]
        assert load["latency"]["p50_ms"] <= load["latency"]["p95_ms"] <= load["latency"]["p99_ms"]
        assert load["requests_per_s"] == pytest.approx(load["requests"] / load["seconds"], rel=0.01)
    with psycopg.connect(url) as conn:
        [(revoked,)] = conn.execute("SELECT revoked_at IS NOT NULL FROM api_keys WHERE name = 'bench serve'")
    assert revoked, "the benchmark's key is revoked when it ends"


def test_bench_serve_says_what_to_fix(database_url):
    bad = cli("bench", "serve", "--clients", "0")
    assert bad.returncode == 2 and "--clients 0: from 1 to 1000" in bad.stderr
    empty = cli("bench", "serve", "--seconds", "1")
    assert empty.returncode == 1 and "no facts to search: `memory-pipelines run`" in empty.stderr


@pytest.mark.slow
def test_bench_backfill_runs_the_same_sessions_over_a_short_and_a_long_range(database_url):
    done = cli("bench", "backfill", "--users", "2", "--sessions", "4", "--short-days", "3", "--long-days", "12",
               "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    short, long = figures["short"], figures["long"]
    assert short["sessions"] == long["sessions"] == 4 and short["messages"] > 0 and long["messages"] > 0
    assert short["days"] <= 3 and 3 < long["days"] <= 12
    assert 1 <= short["days_with_data"] <= short["days"] and 1 <= long["days_with_data"] <= long["days"]
    assert figures["ratio"] == pytest.approx(long["seconds"] / short["seconds"])
    assert short["bookkeeping_seconds"] > 0 and long["bookkeeping_seconds"] > 0  # the idle graph ran
    work = [run["seconds"] - run["bookkeeping_seconds"] for run in (short, long)]
    # with this little data a busy machine can time a range's bookkeeping above the range itself
    assert figures["ratio_without_bookkeeping"] == (pytest.approx(work[1] / work[0]) if min(work) > 0 else None)
    bad = cli("bench", "backfill", "--short-days", "30", "--long-days", "30")
    assert bad.returncode == 2 and "--short-days 30 must be at least 1 and below --long-days 30" in bad.stderr


def test_bench_ingest_measures_each_run_in_a_process_of_its_own(database_url):
    done = cli("bench", "ingest", "--messages", "600", "--days", "3", "--json", timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    runs = {(r["source"], r["scenario"]): r for r in result["runs"]}
    assert {source for source, _ in runs} == {"local", "s3"}
    for (source, scenario), run in runs.items():
        assert run["peak_rss_mb"] > 50 and run["seconds"] > 0, (source, scenario)
        # one day reads one file of 200 messages; the whole range all three
        assert (run["read"], run["file_reads"]) == ((600, 3) if scenario.startswith("whole") else (200, 1))
    assert runs[("local", "one day, first run (indexes every file)")]["files_indexed"] == 3
    assert runs[("local", "one day, index kept")]["files_indexed"] == 0

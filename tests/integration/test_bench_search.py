"""`memory-pipelines bench search` as a smoke test: a tiny synthetic database, every figure
present and sane. Not a timed test."""

from __future__ import annotations

import json

import numpy as np
import psycopg
from memory_pipelines.db.vectors import register_vector_types
from psycopg import sql

from memory_pipelines.embed import EmbedConfig, build_embedder
from tests.helpers import HALFVEC_ATOL, with_database
from tests.integration.test_cli import cli

ARGS = ["bench", "search", "--users", "5", "--chunks", "300", "--facts", "50", "--queries", "5", "--json"]
NAME = "memory_bench_search_u5_c300_f50_s0"
PATHS = {"search_facts", "search_chunks hybrid", "search_chunks vector", "search_chunks text", "unified search"}


def test_bench_search_builds_measures_and_reuses(database_url, pg_admin_url):
    try:
        first = cli(*ARGS, timeout=120)
        assert first.returncode == 0, first.stderr
        report = json.loads(first.stdout)
        assert report["database"] == NAME and report["reused"] is False and report["build_seconds"] > 0
        assert (report["users"], report["chunks"], report["facts"], report["queries"]) == (5, 300, 50, 5)
        assert report["embedder"] == "hashing:hashing-v1:384"
        assert {p["path"] for p in report["paths"]} == PATHS
        for path in report["paths"]:
            latencies = [path["without_embedding"]] + ([path["with_embedding"]] if path["with_embedding"] else [])
            for figures in latencies:
                assert 0 < figures["p50_ms"] <= figures["p95_ms"] <= figures["p99_ms"] <= figures["max_ms"]
                assert figures["n"] == 5
            assert (path["with_embedding"] is None) == (path["path"] == "search_chunks text")
        assert report["query_embedding"]["p50_ms"] > 0
        assert 0 <= report["recall_at_10_chunks"] <= 1 and 0 <= report["recall_at_10_facts"] <= 1

        # the user's own database is untouched; the benchmark's rows carry the pipeline's embeddings
        with psycopg.connect(database_url) as conn:
            assert conn.execute("SELECT count(*) FROM memory_chunks").fetchone()[0] == 0
        with psycopg.connect(with_database(database_url, NAME)) as conn:
            register_vector_types(conn)
            counts = conn.execute("SELECT (SELECT count(*) FROM memory_chunks), (SELECT count(*) FROM memory_facts), "
                                  "(SELECT count(DISTINCT user_id) FROM memory_chunks)").fetchone()
            assert counts == (300, 50, 5)
            rows = conn.execute(
                "SELECT left(content, 2000) || E'\\n' || array_to_string(breadcrumbs, ', '), embedding "
                "FROM memory_chunks ORDER BY id LIMIT 20").fetchall()
            rows += conn.execute(
                "SELECT '[' || category || '] ' || replace(key, '_', ' ') || ': ' || value, embedding "
                "FROM memory_facts ORDER BY id LIMIT 20").fetchall()
        expected = build_embedder(EmbedConfig()).embed([text for text, _ in rows])
        assert np.allclose([v.to_numpy() for _, v in rows], expected, atol=HALFVEC_ATOL)

        again = cli(*ARGS, timeout=120)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["reused"] is True
    finally:
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(NAME)))


def test_bench_search_refuses_bad_sizes(database_url):
    bad = cli("bench", "search", "--users", "10", "--chunks", "5")
    assert bad.returncode == 1 and "chunks >= users" in bad.stderr

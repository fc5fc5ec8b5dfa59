"""The search benchmark's pure parts: seeded text, the bulk hashing embedder, percentiles."""

from __future__ import annotations

import numpy as np

from memory_pipelines.bench.search.build import SearchBenchConfig, TurnIndexSize
from memory_pipelines.bench.search.generate import WordModel, bulk_embedder
from memory_pipelines.bench.search.report import markdown
from memory_pipelines.bench.search.timing import Latency, PathLatency, SearchBenchResult
from memory_pipelines.embed import EmbedConfig, build_embedder


def test_word_model_is_seeded():
    a, b, c = WordModel(0, 4), WordModel(0, 4), WordModel(1, 4)
    users = np.array([0, 1, 2, 3])
    texts = a.chunk_texts(np.random.default_rng(5), users)
    assert texts == b.chunk_texts(np.random.default_rng(5), users)
    assert texts != c.chunk_texts(np.random.default_rng(5), users)
    assert all(t.startswith("User: ") and len(t) > 100 for t in texts)


def test_bulk_hashing_gives_what_the_hashing_embedder_gives():
    embedder = build_embedder(EmbedConfig())
    texts = WordModel(0, 3).chunk_texts(np.random.default_rng(1), np.array([0, 1, 2]))
    texts += ["Valparaíso ＡＢＣ café—ledger-api: port 9090", "", "ß straße STRASSE"]
    fast = bulk_embedder(embedder)(texts)
    assert fast.dtype == np.float32 and fast.shape == (len(texts), 384)
    assert np.allclose(fast, embedder.embed(texts), atol=1e-5)


def test_bulk_hashing_past_its_word_cap_hashes_words_each_time():
    from memory_pipelines.bench.search.generate import _HashingVectors

    embedder = build_embedder(EmbedConfig())
    bulk = _HashingVectors(embedder)
    bulk.MAX_WORDS = 30
    texts = WordModel(2, 3).chunk_texts(np.random.default_rng(2), np.array([0, 1, 2]))
    assert np.allclose(bulk.embed(texts), embedder.embed(texts), atol=1e-5) and bulk.size == 30


def test_latency_percentiles_and_names():
    figures = Latency.of([0.001 * i for i in range(1, 101)])
    assert (figures.p50_ms, figures.max_ms, figures.n) == (50.5, 100.0, 100)
    assert figures.p50_ms < figures.p95_ms < figures.p99_ms < figures.max_ms
    assert SearchBenchConfig(users=5, chunks=300, facts=50).database == "memory_bench_search_u5_c300_f50_s0"


def test_markdown_has_a_row_per_path_and_dashes_without_an_embedding():
    one = Latency(1.0, 2.0, 3.0, 1.5, 4.0, 10)
    result = SearchBenchResult("memory_bench_search_u5_c300_f50_s0", True, 2.0, 5, 300, 50, 10, 0,
                               "hashing:hashing-v1:384", "18.3", one,
                               (PathLatency("search_chunks vector", one, one), PathLatency("search_chunks text", one, None)),
                               1.0, 0.9, 0, None, 1.0, (0.5, 0.75))
    lines = markdown(result).splitlines()
    assert "| search_chunks vector | 1.00 | 2.00 | 3.00 | 1.00 | 2.00 | 3.00 |" in lines
    assert "| search_chunks text | 1.00 | 2.00 | 3.00 | – | – | – |" in lines
    assert lines[-2].endswith("chunks 1.000, facts 0.900")
    assert "load average 0.50 before, 0.75 after" in lines[-1]


def test_markdown_of_the_turn_scale_reports_the_index_size_and_build():
    one = Latency(1.0, 2.0, 3.0, 1.5, 4.0, 10)
    result = SearchBenchResult("memory_bench_search_u5_c5_f50_t1000_s0", False, 9.0, 5, 5, 50, 10, 0,
                               "hashing:hashing-v1:384", "18.3", one, (PathLatency("passages fused", one, one),),
                               0.0, 1.0, 1000, TurnIndexSize(3 * 2**30, 2**30, 120.0, 40.0), 1.0, (0.5, 0.75))
    text = markdown(result)
    assert text.startswith("search latency: 1,000 turns, 5 chunks")
    assert "turn index: table 3.00 GiB, indexes 1.00 GiB on disk; loaded and indexed in 120s, secondary indexes " \
           "built in 40s" in text
    assert "turns 1 (searched exactly), facts 1.000" in text

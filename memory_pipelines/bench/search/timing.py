"""Timing the search paths over the query set (with and without the query embedding), the
recall of the vector queries against exact search, and the result they make."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import psycopg
from memory_pipelines.db.vectors import register_vector_types

from memory_pipelines.bench.search.build import SearchBenchConfig, TurnIndexSize, prepare_database
from memory_pipelines.bench.search.queries import BenchQuery, draw_queries
from memory_pipelines.db import bench as bench_db
from memory_pipelines.embed import Embedder
from memory_pipelines.passages import TurnSearch
from memory_pipelines.search import UnifiedMemorySearch
from memory_pipelines.search.questions import question_parts

RECALL_K = 10


# --- results --------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    n: int

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        ms = np.asarray(seconds, dtype=float) * 1000
        p50, p95, p99 = np.percentile(ms, [50, 95, 99])
        return cls(round(float(p50), 3), round(float(p95), 3), round(float(p99), 3), round(float(ms.mean()), 3),
                   round(float(ms.max()), 3), len(ms))


@dataclass(frozen=True)
class PathLatency:
    path: str
    without_embedding: Latency  # the query vector precomputed
    with_embedding: Latency | None  # embedded inside the call; None for a path that embeds nothing


@dataclass(frozen=True)
class SearchBenchResult:
    database: str
    reused: bool
    build_seconds: float | None  # of the build that made the database (also when reused)
    users: int
    chunks: int
    facts: int
    queries: int
    seed: int
    embedder: str
    server_version: str
    query_embedding: Latency  # embedding one query alone
    paths: tuple[PathLatency, ...]
    recall_at_10_chunks: float  # the chunk vector query against exact search over the user's rows
    recall_at_10_facts: float | None  # None without facts
    turns: int
    turn_index: TurnIndexSize | None  # with turns: the table's and indexes' size on disk, their build time
    measure_seconds: float
    load_average: tuple[float, float]  # the machine's 1-minute load average before and after measuring


# --- measurement ------------------------------------------------------------------------


class PrecomputedEmbedder(Embedder):
    """Answers from vectors computed up front: searches timed without the embedding."""

    def __init__(self, inner: Embedder, vectors: dict[str, list[float]]):
        super().__init__(inner.config)
        self._dimension = inner.dimension
        self.inner, self.vectors = inner, vectors

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    def embed(self, texts):
        return [self.vectors[t] for t in texts]

    def _embed_batch(self, texts):
        return [self.vectors[t] for t in texts]


PATHS: tuple[tuple[str, bool, Callable[[UnifiedMemorySearch, BenchQuery], object]], ...] = (
    ("search_facts", True, lambda s, q: s.search_facts(q.text, q.user_id)),
    ("search_chunks hybrid", True, lambda s, q: s.search_chunks(q.text, q.user_id, mode="hybrid")),
    ("search_chunks vector", True, lambda s, q: s.search_chunks(q.text, q.user_id, mode="vector")),
    ("search_chunks text", False, lambda s, q: s.search_chunks(q.text, q.user_id, mode="text")),
    ("unified search", True, lambda s, q: s.search(q.text, user_id=q.user_id)),
)
# with the turn-level load: passages alone, and unified search within its default budget
TURN_PATHS: tuple[tuple[str, bool, Callable[[UnifiedMemorySearch, BenchQuery], object]], ...] = (
    ("search_facts", True, lambda s, q: s.search_facts(q.text, q.user_id)),
    ("passages fused", True, lambda s, q: s.search_passages(q.text, q.user_id)),
    ("passages text (BM25)", False, lambda s, q: s.search_passages(q.text, q.user_id, how=TurnSearch(signal="text"))),
    ("passages vector", True, lambda s, q: s.search_passages(q.text, q.user_id, how=TurnSearch(signal="vector"))),
    ("unified search, 6,000-character budget", True, lambda s, q: s.search(q.text, user_id=q.user_id)),
)


def _time_pass(conn: psycopg.Connection, embedder: Embedder, call, queries: Sequence[BenchQuery]) -> list[float]:
    seconds = []
    for q in queries:
        search = UnifiedMemorySearch(conn, embedder)  # one per request, as the CLI and the tools make it
        conn.rollback()
        began = time.perf_counter()
        call(search, q)
        seconds.append(time.perf_counter() - began)
        conn.rollback()  # unified search counts accesses: the data stays as built
    return seconds


def _recall(conn: psycopg.Connection, queries: Sequence[BenchQuery], vectors: dict[str, list[float]], model: str,
            vector_query: str, exact_query: str, scope_extra: dict) -> float | None:
    scores = []
    for q in queries:
        # as the server compares it: the query rounded to halfvec
        vector = np.asarray(vectors[q.text], dtype=np.float16).astype(np.float64)
        got = [r[0] for r in bench_db.named_rows(conn, vector_query, {
            "vector": vector, "model": model, "user_id": q.user_id, "all_users": False, "limit": RECALL_K,
            **scope_extra})]
        rows = bench_db.named_rows(conn, exact_query, {"user_id": q.user_id, "model": model})
        if not rows:
            continue
        ids = np.array([r[0] for r in rows])
        matrix = np.stack([r[1].to_numpy() for r in rows]).astype(np.float64)
        distance = 1 - (matrix @ vector) / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(vector))
        order = np.lexsort((ids, distance))[:RECALL_K]
        cutoff = distance[order[-1]] + 1e-6  # ties at the 10th distance count as found
        exact = {int(i): float(d) for i, d in zip(ids, distance)}
        scores.append(sum(1 for i in got if exact.get(i, np.inf) <= cutoff) / len(order))
    conn.rollback()
    return round(float(np.mean(scores)), 4) if scores else None


def measure(url: str, embedder: Embedder, config: SearchBenchConfig,
            progress: Callable[[str], None] = lambda _: None) -> tuple[Latency, tuple[PathLatency, ...], float,
                                                                      float | None]:
    paths = TURN_PATHS if config.turns else PATHS
    with psycopg.connect(url) as conn:
        register_vector_types(conn)
        queries = draw_queries(conn, config.queries + config.warmup, config.seed, turns=bool(config.turns))
        conn.rollback()
        warmup, queries = queries[:config.warmup], queries[config.warmup:]
        embed_seconds, vectors = [], {}
        for q in warmup + queries:
            began = time.perf_counter()
            vectors[q.text] = embedder.embed([q.text])[0]
            embed_seconds.append(time.perf_counter() - began)
            # unified search embeds each part of a question too ("A and B": A, B)
            parts = question_parts(q.text)
            if parts:
                vectors.update(zip(parts, embedder.embed(parts)))
        cached = PrecomputedEmbedder(embedder, vectors)
        for _, _, call in paths:  # statements prepared, caches warm
            _time_pass(conn, cached, call, warmup)
        results = []
        for name, embeds, call in paths:
            without = Latency.of(_time_pass(conn, cached, call, queries))
            with_ = Latency.of(_time_pass(conn, embedder, call, queries)) if embeds else None
            results.append(PathLatency(name, without, with_))
            progress(f"{name}: p95 {without.p95_ms:.1f} ms" + (f", {with_.p95_ms:.1f} ms with the embedding"
                                                                if with_ else ""))
        chunk_recall = 0.0 if config.turns else _recall(  # turn vectors are searched exactly: recall 1 by design
            conn, queries, vectors, embedder.model_id, "chunk_search", "bench_user_chunk_vectors",
            {"session_id": None, "include_forks": False, "match": "", "rank": "", "vector_limit": RECALL_K,
             "text_limit": 0})
        fact_recall = _recall(conn, queries, vectors, embedder.model_id, "fact_vector_search",
                              "bench_user_fact_vectors", {})
        return Latency.of(embed_seconds[len(warmup):]), tuple(results), chunk_recall or 0.0, fact_recall


def run(admin_url: str, config: SearchBenchConfig, embedder: Embedder, *, rebuild: bool = False,
        progress: Callable[[str], None] = lambda _: None) -> SearchBenchResult:
    """Build (or reuse) the benchmark database on the server `admin_url` points at, then measure."""
    url, reused, build_seconds, turn_index = prepare_database(admin_url, config, embedder, rebuild=rebuild,
                                                              progress=progress)
    load_before = load_average()
    began = time.perf_counter()
    embedding, paths, chunk_recall, fact_recall = measure(url, embedder, config, progress)
    with psycopg.connect(url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
    return SearchBenchResult(config.database, reused, round(build_seconds, 1) if build_seconds else None,
                             config.users, config.chunks, config.facts, config.queries, config.seed,
                             embedder.model_id, version, embedding, paths, chunk_recall, fact_recall, config.turns,
                             turn_index, round(time.perf_counter() - began, 1), (load_before, load_average()))


def load_average() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return -1.0

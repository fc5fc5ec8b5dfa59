"""The benchmark's result rendered: a markdown table a path, or JSON."""

from __future__ import annotations

import json
import os

from memory_pipelines.bench.search.timing import RECALL_K, SearchBenchResult


def markdown(result: SearchBenchResult) -> str:
    built = ("reused" if result.reused else "built") + (f", build {result.build_seconds:.0f}s"
                                                         if result.build_seconds else "")
    turns = f"{result.turns:,} turns, " if result.turns else ""
    lines = [f"search latency: {turns}{result.chunks:,} chunks, {result.facts:,} facts, {result.users:,} users, "
             f"{result.queries} queries (seed {result.seed}), embedder {result.embedder}, "
             f"PostgreSQL {result.server_version} ({result.database}, {built})", "",
             "| path | p50 ms | p95 ms | p99 ms | p50 ms +embed | p95 ms +embed | p99 ms +embed |",
             "|---|---|---|---|---|---|---|"]
    for p in result.paths:
        w = p.with_embedding
        tail = f"{w.p50_ms:.2f} | {w.p95_ms:.2f} | {w.p99_ms:.2f}" if w else "– | – | –"
        lines.append(f"| {p.path} | {p.without_embedding.p50_ms:.2f} | {p.without_embedding.p95_ms:.2f} | "
                     f"{p.without_embedding.p99_ms:.2f} | {tail} |")
    e = result.query_embedding
    if result.turn_index is not None:
        t = result.turn_index
        lines += ["", f"turn index: table {t.table_bytes / 2**30:.2f} GiB, indexes {t.index_bytes / 2**30:.2f} GiB on "
                      f"disk; loaded and indexed in {t.load_seconds:.0f}s, secondary indexes built in "
                      f"{t.index_seconds:.0f}s"]
    lines += ["", f"query embedding alone: p50 {e.p50_ms:.2f} ms, p95 {e.p95_ms:.2f} ms, p99 {e.p99_ms:.2f} ms",
              f"recall@{RECALL_K} of the vector queries against exact search: "
              + ("turns 1 (searched exactly)" if result.turns else f"chunks {result.recall_at_10_chunks:.3f}")
              + (f", facts {result.recall_at_10_facts:.3f}" if result.recall_at_10_facts is not None else ""),
              f"measured in {result.measure_seconds:.0f}s, load average {result.load_average[0]:.2f} before, "
              f"{result.load_average[1]:.2f} after, on {os.cpu_count()} cores"]
    return "\n".join(lines)


def to_json(result: SearchBenchResult) -> str:
    from dataclasses import asdict

    return json.dumps(asdict(result), indent=2)

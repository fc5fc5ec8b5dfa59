"""Benchmarks anyone can re-run. `retrieval`: the labelled questions over the sample
(`sample_data/retrieval_questions.json`): recall@k and nDCG@k of each raw-search mode."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import psycopg

from memory_pipelines.config import PACKAGE_DIR
from memory_pipelines.embed import Embedder
from memory_pipelines.search import MemorySearch

QUESTIONS = PACKAGE_DIR / "sample_data" / "retrieval_questions.json"
MODES = ("vector", "text", "hybrid", "tiered")


@dataclass(frozen=True)
class ModeScore:
    mode: str
    recall_at_k: float
    ndcg_at_k: float
    questions: int


def _relevant(content: str, needles: list[str]) -> bool:
    folded = content.casefold()
    return all(n.casefold() in folded for n in needles)


def _ndcg(flags: list[bool], relevant_total: int, k: int) -> float:
    dcg = sum(1 / math.log2(rank + 2) for rank, hit in enumerate(flags[:k]) if hit)
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(k, relevant_total)))
    return dcg / ideal if ideal else 0.0


def retrieval(conn: psycopg.Connection, embedder: Embedder, k: int = 5,
              questions_file: Path = QUESTIONS) -> list[ModeScore]:
    questions = json.loads(questions_file.read_text(encoding="utf-8"))
    search = MemorySearch(conn, embedder)
    scores = []
    for mode in MODES:
        recall_hits, ndcg_total, counted = 0, 0.0, 0
        for q in questions:
            relevant_total = conn.execute(
                "SELECT count(*) FROM memory_chunks WHERE user_id = %s AND "
                "content ILIKE ALL(%s)", (q["user"], [f"%{n}%" for n in q["relevant"]])).fetchone()[0]
            if relevant_total == 0:
                continue  # nothing to find: the question does not count
            hits = search.search_chunks(q["question"], q["user"], limit=k, mode=mode)
            flags = [_relevant(h.text, q["relevant"]) for h in hits]
            recall_hits += any(flags)
            ndcg_total += _ndcg(flags, relevant_total, k)
            counted += 1
        scores.append(ModeScore(mode, recall_hits / counted if counted else 0.0,
                                ndcg_total / counted if counted else 0.0, counted))
    return scores


def markdown(scores: list[ModeScore], k: int, model: str) -> str:
    lines = [f"retrieval over the labelled sample questions, embedder {model}", "",
             f"| mode | recall@{k} | nDCG@{k} | questions |", "|---|---|---|---|"]
    lines += [f"| {s.mode} | {s.recall_at_k:.3f} | {s.ndcg_at_k:.3f} | {s.questions} |" for s in scores]
    return "\n".join(lines)


@dataclass(frozen=True)
class DistillBench:
    """One run of the whole graph over generated transcripts (`bench distill` and `bench cost`)."""

    backend: str
    users: int
    sessions: int
    messages: int
    days: int
    seconds: float
    peak_rss_mb: float
    stage_seconds: dict[str, float]
    table_bytes: dict[str, int]
    calls_by_purpose: dict[str, int]
    tokens_by_purpose: dict[str, int]

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def model_calls(self) -> int:
        return sum(self.calls_by_purpose.values())

    @property
    def calls_per_1000_messages(self) -> float:
        return 1000 * self.model_calls / self.messages if self.messages else 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "messages_per_s": self.messages_per_s, "model_calls": self.model_calls,
                "calls_per_1000_messages": self.calls_per_1000_messages}


def distill_markdown(result: DistillBench) -> str:
    per_k = 1000 / result.messages if result.messages else 0.0
    lines = [
        f"{result.messages:,} messages, {result.sessions:,} sessions, {result.users:,} users, {result.days} days; "
        f"model back end {result.backend}",
        "",
        "| stage | seconds | messages/s | model calls | calls per 1,000 messages | tokens per 1,000 messages |",
        "|---|---|---|---|---|---|",
    ]
    purposes_by_stage = {"conversation_segments": ("judge_segments",),
                         "session_summaries": ("summarize", "find_overturned"),
                         "memory_facts": ("extract_facts", "summarize_facts"),
                         "knowledge_entries": ("synthesize_knowledge",)}
    for stage, seconds in result.stage_seconds.items():
        purposes = purposes_by_stage.get(stage, ())
        calls = sum(result.calls_by_purpose.get(p, 0) for p in purposes)
        tokens = sum(result.tokens_by_purpose.get(p, 0) for p in purposes)
        rate = result.messages / seconds if seconds else 0.0
        lines.append(f"| {stage} | {seconds:.1f} | {rate:,.0f} | {calls:,} | {calls * per_k:.1f} | {tokens * per_k:,.0f} |")
    lines.append(f"| **whole run** | {result.seconds:.1f} | {result.messages_per_s:,.0f} | {result.model_calls:,} "
                 f"| {result.calls_per_1000_messages:.1f} | {sum(result.tokens_by_purpose.values()) * per_k:,.0f} |")
    largest = sorted(result.table_bytes.items(), key=lambda kv: (-kv[1], kv[0]))[:12]
    lines += ["", f"peak memory {result.peak_rss_mb:,.0f} MB", "", "| table (largest 12) | size |", "|---|---|"]
    lines += [f"| {table} | {size / 1_048_576:,.2f} MB |" for table, size in largest]
    return "\n".join(lines)

"""Benchmarks anyone can re-run. `retrieval`: the labelled questions over the sample
(`sample_data/retrieval_questions.json`): recall@k and nDCG@k of each raw-search mode."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
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

"""`bench retrieval --needles`: the labelled needle questions over the sample
(`sample_data/retrieval_questions.json`): recall@k and nDCG@k of each row below.

A hit is relevant when its text holds every needle of the question (case-insensitive),
whichever store it comes from. A question counts when one of its user's chunks holds the
needles, so every row answers the same questions. Rows:

- `vector`, `text`, `hybrid`, `tiered`: `MemorySearch.search_chunks` in that mode.
- `unified`: `UnifiedMemorySearch.search(k=k)`, the agent's read path, cut to its first k
  hits in the order it returns them (facts, raw excerpts, sketches, knowledge); its ideal
  ranking for nDCG counts the relevant items of every store it reads.
- Extra keys of chunks, measured against `hybrid`, whose text path matches breadcrumbs (the
  extractor's entities and the session summary's keys) besides the content:
  - `text - breadcrumbs`, `hybrid - breadcrumbs`: the text path matches and scores content
    alone (`breadcrumbs=False`); the stored chunk vectors still embed the breadcrumbs.
  - `hybrid + facts`: hybrid's top 4k fused by reciprocal rank with the chunks that hold the
    source messages of the facts `search_facts` finds, in its order.
  - `hybrid + summaries`: the same with the chunks of the user's sessions whose summary
    entries (decisions, discussions) hold a query term, most terms hit first, then newest.
  - `hybrid + facts + summaries`: both rankings fused in.

The benchmark changes nothing: it runs in a transaction it rolls back (unified search
counts accesses).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg

from memory_pipelines.config import PACKAGE_DIR
from memory_pipelines.db import bench as bench_db
from memory_pipelines.embed import Embedder
from memory_pipelines.search import MemoryHit, MemorySearch, UnifiedMemorySearch, fuse_rrf, query_terms

QUESTIONS = PACKAGE_DIR / "sample_data" / "retrieval_questions.json"
MODES = ("vector", "text", "hybrid", "tiered")
# row -> (search_chunks mode, text path matches breadcrumbs, extra keys fused in)
KEY_ROWS = {
    "text - breadcrumbs": ("text", False, ()),
    "hybrid - breadcrumbs": ("hybrid", False, ()),
    "hybrid + facts": ("hybrid", True, ("facts",)),
    "hybrid + summaries": ("hybrid", True, ("summaries",)),
    "hybrid + facts + summaries": ("hybrid", True, ("facts", "summaries")),
}
ROWS = (*MODES, "unified", *KEY_ROWS)


@dataclass(frozen=True)
class ModeScore:
    mode: str
    recall_at_k: float
    ndcg_at_k: float
    questions: int


def _relevant(content: str, needles: list[str]) -> bool:
    folded = content.casefold()
    return all(n.casefold() in folded for n in needles)


def ndcg(flags: list[bool], relevant_total: int, k: int) -> float:
    dcg = sum(1 / math.log2(rank + 2) for rank, hit in enumerate(flags[:k]) if hit)
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(k, relevant_total)))
    return dcg / ideal if ideal else 0.0


def _chunk(row: dict) -> MemoryHit:
    return MemoryHit("raw", row["content"], row["session_id"], row["ended_at"], 0.0, id=row["id"],
                     user_id=row["user_id"], start_seq=row["start_seq"], end_seq=row["end_seq"])


def _by_facts(search: MemorySearch, question: str, user: str, depth: int) -> list[MemoryHit]:
    facts = search.search_facts(question, user, limit=depth)
    rows = bench_db.chunks_holding_facts(search.conn, [f.id for f in facts])
    first: dict[int, dict] = {}  # a chunk holding several facts ranks at the first one
    for r in rows:
        first.setdefault(r["id"], r)
    return [_chunk(r) for r in first.values()][:depth]


def _by_summaries(search: MemorySearch, question: str, user: str, depth: int) -> list[MemoryHit]:
    terms = query_terms(question)
    rows = bench_db.chunks_keyed_by_summaries(search.conn, user, terms)
    hit = {r["id"]: sum(t in r["entries"].casefold() for t in terms) for r in rows}
    return [_chunk(r) for r in sorted(rows, key=lambda r: -hit[r["id"]])][:depth]  # stable: newest first


EXTRA_KEYS: dict[str, Callable[[MemorySearch, str, str, int], list[MemoryHit]]] = {
    "facts": _by_facts, "summaries": _by_summaries}


def _ranked(search: UnifiedMemorySearch, row: str, question: str, user: str, k: int) -> list[MemoryHit]:
    if row in MODES:
        return search.search_chunks(question, user, limit=k, mode=row)
    if row == "unified":
        return search.search(question, user_id=user, k=k)[:k]
    mode, breadcrumbs, extra = KEY_ROWS[row]
    depth = k * 4 if extra else k  # as hybrid takes 4 times the limit from each ranking it fuses
    hits = search.search_chunks(question, user, limit=depth, mode=mode, breadcrumbs=breadcrumbs)
    if not extra:
        return hits
    return fuse_rrf([hits, *(EXTRA_KEYS[key](search, question, user, depth) for key in extra)])[:k]


def retrieval(conn: psycopg.Connection, embedder: Embedder, k: int = 5,
              questions_file: Path = QUESTIONS) -> list[ModeScore]:
    questions = json.loads(questions_file.read_text(encoding="utf-8"))
    search = UnifiedMemorySearch(conn, embedder)
    recall_hits = dict.fromkeys(ROWS, 0)
    ndcg_total = dict.fromkeys(ROWS, 0.0)
    counted = 0
    with conn.transaction(force_rollback=True):
        for q in questions:
            chunks, other_stores = bench_db.relevant_counts(conn, q["user"], q["relevant"])
            if chunks == 0:
                continue  # nothing to find: the question does not count
            counted += 1
            for row in ROWS:
                flags = [_relevant(h.text, q["relevant"]) for h in _ranked(search, row, q["question"], q["user"], k)]
                relevant_total = chunks + other_stores if row == "unified" else chunks
                recall_hits[row] += any(flags)
                # an archive message unified search returns is not counted above: the ideal
                # ranking holds at least what was found
                ndcg_total[row] += ndcg(flags, max(relevant_total, sum(flags)), k)
    return [ModeScore(row, recall_hits[row] / counted if counted else 0.0,
                      ndcg_total[row] / counted if counted else 0.0, counted) for row in ROWS]


def markdown(scores: list[ModeScore], k: int, model: str) -> str:
    lines = [f"retrieval over the labelled sample questions, embedder {model}", "",
             f"| mode | recall@{k} | nDCG@{k} | questions |", "|---|---|---|---|"]
    lines += [f"| {s.mode} | {s.recall_at_k:.3f} | {s.ndcg_at_k:.3f} | {s.questions} |" for s in scores]
    lines += ["", "unified: the agent's read path, its first k hits of any store; - breadcrumbs: the text path "
                  "matches chunk content alone; + facts, + summaries: chunks keyed by the user's facts or session "
                  "summaries that match, fused into hybrid by reciprocal rank"]
    return "\n".join(lines)

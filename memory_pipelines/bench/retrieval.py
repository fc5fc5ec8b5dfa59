"""`bench retrieval`: recall of evidence turns at equal reading budgets over the labelled
evidence set (`memory_pipelines.bench.evidence_set`), per row and category, with nDCG@k and
search latency."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import psycopg

from memory_pipelines.bench.evidence_set import CATEGORIES, Question
from memory_pipelines.bench.needles import ndcg
from memory_pipelines.db import bench as bench_db
from memory_pipelines.embed import Embedder
from memory_pipelines.passages import Budget, TurnSearch, fill_passages
from memory_pipelines.search import MemoryHit, UnifiedMemorySearch, passage_hit
from memory_pipelines.search.unified import ServePolicy

BUDGETS = (720, 1440, 3600, 7200)
EVIDENCE_K = 20  # hits each row is asked for: enough to fill the largest budget
# row -> how it searches (memory_pipelines.passages.TurnSearch for the turn rows)
TURN_ROWS = {
    "bm25 (turns in context)": TurnSearch(signal="text"),
    "dense (turns in context)": TurnSearch(signal="vector"),
    "fused, score fusion": TurnSearch(),
    "fused, reciprocal rank": TurnSearch(fusion="rrf"),
    "fused - keys": TurnSearch(weights="A"),
    "bm25, single turns": TurnSearch(signal="text", neighbour_weight=0.0, before=0, after=0),
}
UNIFIED = "unified (the agent's tool)"
FOREST = "forest recall (tree descent)"
EVIDENCE_ROWS = (*TURN_ROWS, UNIFIED, FOREST, "chunks, hybrid (before)", "archive full text (before)")
# `--variants`: the settings the defaults were chosen against, each with the time the question
# names ranked first (`prefer`) or kept to (`keep`), as unified search can do
VARIANT_ROWS = {
    "fused, time named kept": (TurnSearch(), "keep"),
    "fused, time named first": (TurnSearch(), "prefer"),
    "fused dense 0.6, time first": (TurnSearch(dense_weight=0.6), "prefer"),
    "fused dense 0.7, time first": (TurnSearch(dense_weight=0.7), "prefer"),
    "fused rrf, time first": (TurnSearch(fusion="rrf"), "prefer"),
    "fused widened 1+1, time first": (TurnSearch(before=1), "prefer"),
    "dense, time first": (TurnSearch(signal="vector"), "prefer"),
}

# `--ablations`: unified search without each of the choices that spread its budget (issue 40),
# without all of them, and with the alternatives measured and not adopted
ABLATION_ROWS = {
    "unified - session penalty": ServePolicy(how=TurnSearch(session_penalty=0.0)),
    "unified - question parts": ServePolicy(split_questions=False),
    "unified - self statements first": ServePolicy(self_first="never"),
    "unified - chatter dropped": ServePolicy(drop_chatter=False),
    "unified - all five": ServePolicy(TurnSearch(session_penalty=0.0), False, "never", False, None),
    "unified, self statements first for every question": ServePolicy(self_first="always"),
    "unified, self statements first for questions about the person": ServePolicy(self_first="person"),
    "unified - best turns alone within 1,440": ServePolicy(alone_within=None),
    "unified, best turns alone at every budget": ServePolicy(how=TurnSearch(before=0, after=0)),
}
SETS = ("base", "year")  # the evidence set's questions: the first set, and the year of long conversations


@dataclass(frozen=True)
class Read:
    """One hit as an agent reads it: the characters of each of its turns, in order (a fact
    or entry is one piece, holding the turn it was taken from when that is one turn)."""
    pieces: tuple[tuple[int, tuple[tuple[str, int], ...]], ...]  # (characters, turns it holds)

    @property
    def turns(self) -> set[tuple[str, int]]:
        return {t for _, held in self.pieces for t in held}


def _reads(conn: psycopg.Connection, hits: Sequence[MemoryHit]) -> list[Read]:
    chunk_sessions = sorted({h.session_id for h in hits if h.source_type == "raw" and not h.turns and h.id})
    lines = {}
    if chunk_sessions:  # a chunk is read turn by turn: its turns' lengths
        for session_id, seq, role, body in bench_db.turn_lengths(conn, chunk_sessions):
            lines[(session_id, seq)] = len(f"{role}: {body}")
    reads = []
    for h in hits:
        if h.turns:
            reads.append(Read(tuple((len(t.line), ((t.session_id, t.seq),)) for t in h.turns)))
        elif h.source_type == "raw" and h.id is not None:
            seqs = [s for s in range(h.start_seq, h.end_seq + 1) if (h.session_id, s) in lines]
            reads.append(Read(tuple((lines[(h.session_id, s)], ((h.session_id, s),)) for s in seqs)))
        else:
            one = h.start_seq is not None and h.start_seq == h.end_seq and h.session_id is not None
            reads.append(Read(((len(h.text), ((h.session_id, h.start_seq),) if one else ()),)))
    return reads


def recall_within(reads: Sequence[Read], evidence: set, budget: int) -> float:
    """Evidence turns read within `budget` characters, hits read in order, turn by turn (a
    turn counts once its characters fit), as a share of the evidence."""
    spent, found = 0, set()
    for read in reads:
        for chars, held in read.pieces:
            if spent + chars > budget:
                return len(found & evidence) / len(evidence)
            spent += chars
            found.update(held)
    return len(found & evidence) / len(evidence)


def _evidence_hits(search: UnifiedMemorySearch, row: str, q: Question, budget: int | None = None) -> list[MemoryHit]:
    """What the row serves for the question; with a budget, the passage rows and unified
    search fill it as they serve it (the rows before passages are read in order instead)."""
    if row == FOREST:
        hits = search.search_forest(q.question, q.user_id, limit=EVIDENCE_K)
        return hits if budget is None else \
            [passage_hit(p) for p in fill_passages([h.as_passage() for h in hits], Budget(budget))]
    if row in TURN_ROWS or row in VARIANT_ROWS:
        how, timing = VARIANT_ROWS.get(row, (TURN_ROWS.get(row), "none"))
        named = search.named_time(q.question, q.user_id, None) if timing != "none" else None
        window = {"prefer": (named.since, named.until)} if named and timing == "prefer" else \
            {"since": named.since, "until": named.until} if named else {}
        hits = search.search_passages(q.question, q.user_id, limit=EVIDENCE_K, how=how, **window)
        if not hits and window:  # nothing in the time named: every time
            hits = search.search_passages(q.question, q.user_id, limit=EVIDENCE_K, how=how)
        if budget is None:
            return hits
        return [passage_hit(p) for p in fill_passages([h.as_passage() for h in hits], Budget(budget))]
    if row == UNIFIED or row in ABLATION_ROWS:
        return search.search(q.question, user_id=q.user_id, k=EVIDENCE_K, budget_chars=budget,
                             policy=ABLATION_ROWS.get(row, ServePolicy()))
    if row.startswith("chunks"):
        return search.search_chunks(q.question, q.user_id, limit=EVIDENCE_K)
    return search.search_archive(q.question, q.user_id, limit=EVIDENCE_K)


@dataclass(frozen=True)
class EvidenceScore:
    row: str
    set: str  # "base", "year" or "all"
    category: str  # or "all"
    questions: int
    recall_at_k: float
    recall_at_budget: dict[int, float]
    ndcg_at_k: float
    p50_ms: float
    p95_ms: float


def percentile(values: Sequence[float], share: float) -> float:
    """The value `share` (0-1) of the way up the sorted values (0 for none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def evidence_retrieval(conn: psycopg.Connection, embedder: Embedder, questions: Sequence[Question],
                       rows: Sequence[str] = EVIDENCE_ROWS, k: int = 10) -> list[EvidenceScore]:
    """Every row over every question: recall of evidence turns in the first k hits and
    within each budget, nDCG@k (a hit is relevant when it holds an evidence turn), search
    latency; overall, per set of questions and per category. Changes nothing (unified search
    counts accesses: rolled back)."""
    search = UnifiedMemorySearch(conn, embedder)
    per: dict[tuple[str, str, str], list[tuple[float, dict[int, float], float, float]]] = {}
    with conn.transaction(force_rollback=True):
        for q in questions:
            evidence = {tuple(e) for e in q.evidence}
            for row in rows:
                started = time.perf_counter()
                hits = _evidence_hits(search, row, q)
                ms = (time.perf_counter() - started) * 1000
                reads = _reads(conn, hits)
                at_k = len(set().union(*(r.turns for r in reads[:k])) & evidence) / len(evidence) if reads else 0.0
                flags = [bool(r.turns & evidence) for r in reads]
                within = {b: recall_within(_reads(conn, _evidence_hits(search, row, q, b)), evidence, b)
                          for b in BUDGETS}
                outcome = (at_k, within, ndcg(flags, min(len(evidence), k), k), ms)
                for part in (q.set, "all"):
                    for category in (q.category, "all"):
                        per.setdefault((row, part, category), []).append(outcome)
    scores = []
    for (row, part, category), outcomes in per.items():
        n = len(outcomes)
        scores.append(EvidenceScore(
            row, part, category, n, sum(o[0] for o in outcomes) / n,
            {b: sum(o[1][b] for o in outcomes) / n for b in BUDGETS}, sum(o[2] for o in outcomes) / n,
            percentile([o[3] for o in outcomes], 0.5), percentile([o[3] for o in outcomes], 0.95)))
    order = {c: i for i, c in enumerate(("all", *SETS, *CATEGORIES))}
    return sorted(scores, key=lambda s: (order[s.set], order[s.category], list(rows).index(s.row)))


def evidence_markdown(scores: Sequence[EvidenceScore], k: int, model: str, questions: int) -> str:
    """Every row over all questions, then per set and per category of question, within each budget."""
    budgets = " | ".join(f"within {b:,}" for b in BUDGETS)
    lines = [f"recall of evidence turns over the labelled evidence set ({questions} questions), embedder {model}",
             "", f"| row | recall@{k} | {budgets} | nDCG@{k} | p50 ms | p95 ms |",
             "|---|---|" + "---|" * len(BUDGETS) + "---|---|---|"]
    for s in scores:
        if s.set == "all" and s.category == "all":
            cells = " | ".join(f"{s.recall_at_budget[b]:.1%}" for b in BUDGETS)
            lines.append(f"| {s.row} | {s.recall_at_k:.1%} | {cells} | {s.ndcg_at_k:.3f} | {s.p50_ms:.1f} | "
                         f"{s.p95_ms:.1f} |")
    lines += ["", "unified search per set and kind of question, recall within 720 / 1,440 / 3,600 / 7,200 characters:", "",
              "| row | set | kind | questions | " + " | ".join(f"{b:,}" for b in BUDGETS) + " |",
              "|---|---|---|---|" + "---|" * len(BUDGETS)]
    for s in scores:
        if s.set != "all" and s.row.startswith("unified"):
            cells = " | ".join(f"{s.recall_at_budget[b]:.1%}" for b in BUDGETS)
            lines.append(f"| {s.row} | {s.set} | {s.category} | {s.questions} | {cells} |")
    categories = [c for c in CATEGORIES if any(s.category == c for s in scores)]
    lines += ["", "per kind over both sets, recall within 1,440 / 7,200 characters:", "",
              "| row | " + " | ".join(categories) + " |", "|---|" + "---|" * len(categories)]
    for row in dict.fromkeys(s.row for s in scores):
        cells = []
        for c in categories:
            [s] = [s for s in scores if s.row == row and s.set == "all" and s.category == c]
            cells.append(f"{s.recall_at_budget[1440]:.0%} / {s.recall_at_budget[7200]:.0%}")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

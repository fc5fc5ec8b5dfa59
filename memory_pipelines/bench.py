"""Benchmarks anyone can re-run. `retrieval`: the labelled questions over the sample
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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from memory_pipelines.config import PACKAGE_DIR
from memory_pipelines.db.queries import query
from memory_pipelines.embed import Embedder
from memory_pipelines.evidence_set import CATEGORIES, Question
from memory_pipelines.llm.pricing import Price
from memory_pipelines.passages import Budget, TurnSearch, fill_passages
from memory_pipelines.search import (
    MemoryHit, MemorySearch, UnifiedMemorySearch, fuse_rrf, passage_hit, query_terms,
)

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


def _ndcg(flags: list[bool], relevant_total: int, k: int) -> float:
    dcg = sum(1 / math.log2(rank + 2) for rank, hit in enumerate(flags[:k]) if hit)
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(k, relevant_total)))
    return dcg / ideal if ideal else 0.0


def _rows(conn: psycopg.Connection, name: str, params: dict) -> list[dict]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query(name), params).fetchall()


def _chunk(row: dict) -> MemoryHit:
    return MemoryHit("raw", row["content"], row["session_id"], row["ended_at"], 0.0, id=row["id"],
                     user_id=row["user_id"], start_seq=row["start_seq"], end_seq=row["end_seq"])


def _by_facts(search: MemorySearch, question: str, user: str, depth: int) -> list[MemoryHit]:
    facts = search.search_facts(question, user, limit=depth)
    rows = _rows(search.conn, "bench_chunks_holding_facts", {"fact_ids": [f.id for f in facts]})
    first: dict[int, dict] = {}  # a chunk holding several facts ranks at the first one
    for r in rows:
        first.setdefault(r["id"], r)
    return [_chunk(r) for r in first.values()][:depth]


def _by_summaries(search: MemorySearch, question: str, user: str, depth: int) -> list[MemoryHit]:
    terms = query_terms(question)
    rows = _rows(search.conn, "bench_chunks_keyed_by_summaries", {"user_id": user, "terms": terms})
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
            chunks, other_stores = conn.execute(query("bench_relevant_counts"),
                                                {"user_id": q["user"], "needles": q["relevant"]}).fetchone()
            if chunks == 0:
                continue  # nothing to find: the question does not count
            counted += 1
            for row in ROWS:
                flags = [_relevant(h.text, q["relevant"]) for h in _ranked(search, row, q["question"], q["user"], k)]
                relevant_total = chunks + other_stores if row == "unified" else chunks
                recall_hits[row] += any(flags)
                # an archive message unified search returns is not counted above: the ideal
                # ranking holds at least what was found
                ndcg_total[row] += _ndcg(flags, max(relevant_total, sum(flags)), k)
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


@dataclass(frozen=True)
class PurposeUsage:
    """The model calls of one purpose in a run, and their tokens."""
    calls: int
    input_tokens: int
    output_tokens: int
    schema_retried: int  # calls whose first answer broke the schema and were asked again
    failed: int


@dataclass(frozen=True)
class DatabaseLoad:
    """What the database server did while the runs ran: client backends sampled every
    0.2 s, the server's counters read before and after (they include Dagster's storage,
    which lives in the same database)."""

    seconds: float
    connections_peak: int  # client connections open at once, the sampler's own aside
    active_peak: int  # of them running a statement at once
    # backend-seconds by what a connection was doing when sampled, as kind -> event: "CPU"
    # (running), a wait's type and event ("Lock" -> "transactionid", "LWLock" -> "WALWrite",
    # "IO" -> "WalSync", ...) or "idle in transaction"
    doing_seconds: dict[str, dict[str, float]]
    wal_bytes: int
    wal_full_pages: int  # full-page images: the first change of a page after a checkpoint
    wal_buffers_full: int  # WAL written out early because its buffers were full
    checkpoints_requested: int  # checkpoints forced by WAL volume (max_wal_size), not by time
    commits: int
    rollbacks: int
    deadlocks: int
    server_cpu_seconds: float | None  # the server's processes' CPU; None when it runs elsewhere
    machine_cpu_seconds: float  # every process's CPU on this machine
    machine_iowait_seconds: float
    cores: int

    def waiting_seconds(self, kind: str) -> float:
        """Backend-seconds spent on one kind of wait (Lock, LWLock, IO, ...)."""
        return sum(self.doing_seconds.get(kind, {}).values())

    def to_json(self) -> dict:
        return {**asdict(self), "lock_wait_seconds": self.waiting_seconds("Lock"),
                "lwlock_wait_seconds": self.waiting_seconds("LWLock"), "io_wait_seconds": self.waiting_seconds("IO")}


def database_markdown(load: DatabaseLoad, messages: int) -> list[str]:
    """The server's load as table lines, with each amount per 1,000 messages."""
    def per_k(amount: float) -> str:
        return f"{1000 * amount / messages:,.2f}" if messages else "-"

    def share(amount: float) -> str:
        return f"{100 * amount / (load.seconds * load.cores):.0f} % of {load.cores} cores" if load.seconds else "-"

    cpu = load.server_cpu_seconds
    lines = ["", f"Database server during the runs ({load.seconds:.1f} s):", "",
             "| measure | amount | per 1,000 messages | note |", "|---|---|---|---|",
             f"| connections open at once (peak) | {load.connections_peak} | | {load.active_peak} running a statement |",
             f"| server CPU seconds | {'-' if cpu is None else f'{cpu:.1f}'} | {'-' if cpu is None else per_k(cpu)} "
             f"| {'not on this machine' if cpu is None else share(cpu)} |",
             f"| machine CPU seconds (every process) | {load.machine_cpu_seconds:.1f} | {per_k(load.machine_cpu_seconds)} "
             f"| {share(load.machine_cpu_seconds)}; I/O wait {load.machine_iowait_seconds:.1f} s |",
             f"| WAL MB | {load.wal_bytes / 1_048_576:,.1f} | {per_k(load.wal_bytes / 1_048_576)} "
             f"| {load.wal_bytes / 1_048_576 / load.seconds if load.seconds else 0:,.1f} MB/s; {load.wal_full_pages:,} full pages; "
             f"buffers full {load.wal_buffers_full:,}; {load.checkpoints_requested} checkpoints forced by volume |",
             f"| commits | {load.commits:,} | {per_k(load.commits)} "
             f"| {load.commits / load.seconds if load.seconds else 0:,.0f}/s; {load.rollbacks:,} rollbacks, {load.deadlocks} deadlocks |"]
    for kind in ("Lock", "LWLock", "IO"):
        lines.append(f"| backend-seconds waiting on {kind} | {load.waiting_seconds(kind):.2f} | | |")
    busiest = sorted(((spent, kind, event) for kind, events in load.doing_seconds.items()
                      for event, spent in events.items()), key=lambda row: (-row[0], row[1], row[2]))[:8]
    lines += ["", "| what connections were doing (sampled) | backend-seconds |", "|---|---|"]
    lines += [f"| {kind}: {event} | {spent:.1f} |" if event else f"| {kind} | {spent:.1f} |"
              for spent, kind, event in busiest]
    return lines


@dataclass(frozen=True)
class DistillBench:
    """One run of the whole graph over generated transcripts (`bench distill` and `bench cost`)."""

    backend: str
    users: int
    sessions: int
    messages: int
    days: int  # the range run, first to last day with messages
    days_with_data: int
    seconds: float
    peak_rss_mb: float
    stage_seconds: dict[str, float]
    table_bytes: dict[str, int]
    usage: dict[str, PurposeUsage]  # purpose -> its calls and tokens
    summarized_session_days: int  # (session, day) pairs with a summary written by a call
    # the same range through the same assets and checks with bodies that do nothing: what
    # Dagster's own bookkeeping of the run costs (measured by `bench backfill` only)
    bookkeeping_seconds: float | None = None
    shards: int = 1  # runs at once, one per user shard
    executor: str = "in_process"  # where the runs' steps executed
    database: DatabaseLoad | None = None  # what the server did during the runs

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def model_calls(self) -> int:
        return sum(u.calls for u in self.usage.values())

    def per_1000_messages(self, amount: float) -> float:
        return 1000 * amount / self.messages if self.messages else 0.0

    def per_session_day(self, amount: float) -> float:
        return amount / self.summarized_session_days if self.summarized_session_days else 0.0

    @property
    def distillation_calls(self) -> int:
        """The calls that distil transcripts into memory: judging and the chunks' distillation
        (the users' narratives and the tree's nodes are written from stored memory)."""
        return sum(self.usage[p].calls for stage in DISTILLATION_STAGES for p in PURPOSES_BY_STAGE[stage]
                   if p in self.usage)

    @property
    def input_tokens(self) -> int:
        return sum(u.input_tokens for u in self.usage.values())

    @property
    def output_tokens(self) -> int:
        return sum(u.output_tokens for u in self.usage.values())

    def cost_usd(self, price: Price) -> float:
        return price.cost(self.input_tokens, self.output_tokens)

    def to_json(self, prices: Mapping[str, Price] | None = None) -> dict:
        return {**asdict(self), "database": self.database.to_json() if self.database else None,
                "messages_per_s": self.messages_per_s, "model_calls": self.model_calls,
                "calls_per_1000_messages": self.per_1000_messages(self.model_calls),
                "calls_per_session_day": self.per_session_day(self.model_calls),
                "distillation_calls_per_session_day": self.per_session_day(self.distillation_calls),
                "input_tokens_per_1000_messages": self.per_1000_messages(self.input_tokens),
                "output_tokens_per_1000_messages": self.per_1000_messages(self.output_tokens),
                "estimated_cost_usd": {model: {"run": self.cost_usd(price),
                                               "per_1000_messages": self.per_1000_messages(self.cost_usd(price)),
                                               "per_session_day": self.per_session_day(self.cost_usd(price))}
                                       for model, price in (prices or {}).items()}}


# the stages whose steps make the calls of these purposes
PURPOSES_BY_STAGE = {"conversation_segments": ("judge_segments",),
                     "session_summaries": ("distill", "find_overturned"),
                     "memory_facts": ("summarize_facts",), "memory_tree": ("summarize_node",)}
DISTILLATION_STAGES = ("conversation_segments", "session_summaries")


def distill_markdown(result: DistillBench, prices: Mapping[str, Price] | None = None) -> str:
    per_k = result.per_1000_messages
    lines = [
        f"{result.messages:,} messages, {result.sessions:,} sessions, {result.users:,} users, {result.days} days, "
        f"{result.summarized_session_days:,} summarized session-days; model back end {result.backend}; "
        f"{result.shards} shard run(s) at once, executor {result.executor}",
        "",
        "| stage | seconds | messages/s | model calls | calls per 1,000 messages | input tokens per 1,000 messages "
        "| output tokens per 1,000 messages |",
        "|---|---|---|---|---|---|---|",
    ]
    for stage, seconds in result.stage_seconds.items():
        used = [result.usage[p] for p in PURPOSES_BY_STAGE.get(stage, ()) if p in result.usage]
        calls = sum(u.calls for u in used)
        rate = result.messages / seconds if seconds else 0.0
        lines.append(f"| {stage} | {seconds:.1f} | {rate:,.0f} | {calls:,} | {per_k(calls):.1f} "
                     f"| {per_k(sum(u.input_tokens for u in used)):,.0f} | {per_k(sum(u.output_tokens for u in used)):,.0f} |")
    lines.append(f"| **whole run** | {result.seconds:.1f} | {result.messages_per_s:,.0f} | {result.model_calls:,} "
                 f"| {per_k(result.model_calls):.1f} | {per_k(result.input_tokens):,.0f} | {per_k(result.output_tokens):,.0f} |")
    if result.usage:
        lines += ["", "| purpose | calls | calls per summarized session-day | input tokens per 1,000 messages "
                      "| output tokens per 1,000 messages | asked again (schema) | failed |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {purpose} | {u.calls:,} | {result.per_session_day(u.calls):.2f} | {per_k(u.input_tokens):,.0f} "
                  f"| {per_k(u.output_tokens):,.0f} | {u.schema_retried:,} | {u.failed:,} |"
                  for purpose, u in sorted(result.usage.items())]
        lines.append(f"| **all** | {result.model_calls:,} | {result.per_session_day(result.model_calls):.2f} "
                     f"| {per_k(result.input_tokens):,.0f} | {per_k(result.output_tokens):,.0f} "
                     f"| {sum(u.schema_retried for u in result.usage.values()):,} "
                     f"| {sum(u.failed for u in result.usage.values()):,} |")
        lines += ["", f"distillation (judging and the chunks' distillation calls): "
                      f"{result.per_session_day(result.distillation_calls):.2f} calls per summarized session-day; "
                      f"the whole run, with the users' narratives and the tree's nodes: "
                      f"{result.per_session_day(result.model_calls):.2f}"]
    if result.usage and prices:
        lines += ["", "Estimated cost of these tokens at the price table's prices (US dollars):", "",
                  "| model | input / output per million tokens | this run | per 1,000 messages | per session-day |",
                  "|---|---|---|---|---|"]
        lines += [f"| {model} | {price.input_usd_per_mtok:g} / {price.output_usd_per_mtok:g} | {result.cost_usd(price):.4f} "
                  f"| {per_k(result.cost_usd(price)):.4f} | {result.per_session_day(result.cost_usd(price)):.5f} |"
                  for model, price in prices.items()]
    if result.database is not None:
        lines += database_markdown(result.database, result.messages)
    largest = sorted(result.table_bytes.items(), key=lambda kv: (-kv[1], kv[0]))[:12]
    lines += ["", f"peak memory {result.peak_rss_mb:,.0f} MB", "", "| table (largest 12) | size |", "|---|---|"]
    lines += [f"| {table} | {size / 1_048_576:,.2f} MB |" for table, size in largest]
    return "\n".join(lines)


@dataclass(frozen=True)
class BackfillBench:
    """The same generated sessions over a short and a long range (`bench backfill`)."""
    short: DistillBench
    long: DistillBench

    @property
    def ratio(self) -> float:
        return self.long.seconds / self.short.seconds if self.short.seconds else 0.0

    @property
    def ratio_without_bookkeeping(self) -> float:
        """long / short of what the stages cost beyond Dagster's bookkeeping of the days."""
        work = [run.seconds - (run.bookkeeping_seconds or 0.0) for run in (self.short, self.long)]
        return work[1] / work[0] if work[0] > 0 else 0.0

    def to_json(self) -> dict:
        return {"short": self.short.to_json(), "long": self.long.to_json(), "ratio": self.ratio,
                "ratio_without_bookkeeping": self.ratio_without_bookkeeping, "target_ratio": BACKFILL_TARGET_RATIO}


BACKFILL_TARGET_RATIO = 1.5


def backfill_markdown(result: BackfillBench) -> str:
    lines = ["| range | days with data | messages | seconds | seconds per day | messages/s "
             "| of which Dagster's bookkeeping |", "|---|---|---|---|---|---|---|"]
    for run in (result.short, result.long):
        lines.append(f"| {run.days} days | {run.days_with_data} | {run.messages:,} | {run.seconds:.1f} | "
                     f"{run.seconds / run.days:.2f} | {run.messages_per_s:,.0f} | {run.bookkeeping_seconds or 0:.1f} |")
    lines += ["", f"long / short: {result.ratio:.2f}x (target at most {BACKFILL_TARGET_RATIO}x); "
                  f"without Dagster's bookkeeping: {result.ratio_without_bookkeeping:.2f}x; "
                  f"model back end {result.short.backend}",
              "", "Dagster's bookkeeping: the same range through the same assets and checks with bodies "
                  "that do nothing (a materialization and a planned check row per asset, check and day)."]
    return "\n".join(lines)


# --- the labelled evidence set (memory_pipelines.evidence_set) -------------------------------

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
        for session_id, seq, role, body in conn.execute(query("bench_turn_lengths"), {"session_ids": chunk_sessions}):
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
    if row == UNIFIED:
        return search.search(q.question, user_id=q.user_id, k=EVIDENCE_K, budget_chars=budget)
    if row.startswith("chunks"):
        return search.search_chunks(q.question, q.user_id, limit=EVIDENCE_K)
    return search.search_archive(q.question, q.user_id, limit=EVIDENCE_K)


@dataclass(frozen=True)
class EvidenceScore:
    row: str
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
    latency; overall and per category. Changes nothing (unified search counts accesses: rolled back)."""
    search = UnifiedMemorySearch(conn, embedder)
    per: dict[tuple[str, str], list[tuple[float, dict[int, float], float, float]]] = {}
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
                outcome = (at_k, within, _ndcg(flags, min(len(evidence), k), k), ms)
                for category in (q.category, "all"):
                    per.setdefault((row, category), []).append(outcome)
    scores = []
    for (row, category), outcomes in per.items():
        n = len(outcomes)
        scores.append(EvidenceScore(
            row, category, n, sum(o[0] for o in outcomes) / n,
            {b: sum(o[1][b] for o in outcomes) / n for b in BUDGETS}, sum(o[2] for o in outcomes) / n,
            percentile([o[3] for o in outcomes], 0.5), percentile([o[3] for o in outcomes], 0.95)))
    order = {c: i for i, c in enumerate(("all", *CATEGORIES))}
    return sorted(scores, key=lambda s: (order[s.category], list(rows).index(s.row)))


def evidence_markdown(scores: Sequence[EvidenceScore], k: int, model: str, questions: int) -> str:
    budgets = " | ".join(f"within {b:,}" for b in BUDGETS)
    lines = [f"recall of evidence turns over the labelled evidence set ({questions} questions), embedder {model}",
             "", f"| row | recall@{k} | {budgets} | nDCG@{k} | p50 ms | p95 ms |",
             "|---|---|" + "---|" * len(BUDGETS) + "---|---|---|"]
    for s in scores:
        if s.category == "all":
            cells = " | ".join(f"{s.recall_at_budget[b]:.1%}" for b in BUDGETS)
            lines.append(f"| {s.row} | {s.recall_at_k:.1%} | {cells} | {s.ndcg_at_k:.3f} | {s.p50_ms:.1f} | "
                         f"{s.p95_ms:.1f} |")
    categories = [c for c in CATEGORIES if any(s.category == c for s in scores)]
    lines += ["", "per category, recall within 1,440 / 7,200 characters:", "",
              "| row | " + " | ".join(categories) + " |", "|---|" + "---|" * len(categories)]
    for row in dict.fromkeys(s.row for s in scores):
        cells = []
        for c in categories:
            [s] = [s for s in scores if s.row == row and s.category == c]
            cells.append(f"{s.recall_at_budget[1440]:.0%} / {s.recall_at_budget[7200]:.0%}")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    return "\n".join(lines)

"""Passages: what raw search serves. The turn-level index (`memory_turns`) is searched by
BM25 over stemmed lexemes and by the embeddings of turns read with their neighbours; the
two rankings are fused; each best turn is widened with its neighbours (2 before, 1 after,
as the Agenvoy design widens a hit) and overlapping or adjacent windows of one session
merge into one passage. A budget of characters cuts what is served, passage by passage,
trimming the last one around its best turn rather than blind.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import psycopg

from memory_pipelines.db import search as search_db
from memory_pipelines.db import turns as turns_db
from memory_pipelines.llm.rendering import estimate_tokens
from memory_pipelines.rules.noise import is_chatter

# BM25's parameters (the usual ones: term frequency saturation, length normalization)
BM25_K1, BM25_B = 1.2, 0.75
# a turn's lexical score in context: its own BM25 plus this share of each neighbour's
NEIGHBOUR_WEIGHT = 0.5
# normalized score fusion: the dense ranking's weight (the lexical one has the rest)
DENSE_WEIGHT = 0.5
RRF_K = 60
# a turn of the time a question names ("in May") counts this share more; passages of other
# times still come, after (the answer may lie before that time: "where did I live in March")
TIME_BOOST = 0.5
BEFORE, AFTER = 2, 1  # the neighbours a best turn is widened with
# each passage already opened in a session lowers the next one of that session by this share:
# a second session's passage comes before a third of one session when their scores are close
# (evidence spread over sessions; docs/benchmarks.md, spread evidence)
SESSION_PENALTY = 0.3
CANDIDATES = 200  # turns each signal ranks before fusion
FUSIONS = ("score", "rrf")
SIGNALS = ("fused", "text", "vector")
ROLE_LABELS = {"user": "User", "assistant": "Assistant", "tool": "Tool"}
ELLIPSIS = "…"


@dataclass(frozen=True)
class Turn:
    id: int  # the memory_turns row (`memory-pipelines lineage turn ID`)
    session_id: str
    seq: int
    pos: int
    role: str
    ts: datetime
    body: str

    @property
    def line(self) -> str:
        return f"{ROLE_LABELS.get(self.role, self.role)}: {self.body}"


@dataclass(frozen=True)
class Passage:
    """A served stretch of one session: its turns, why it matched, how well."""
    user_id: str
    session_id: str
    turns: tuple[Turn, ...]
    best_seq: int  # the turn that matched best: trimming keeps it
    score: float
    terms: tuple[str, ...]  # the query lexemes its best turns hold
    similarity: float | None  # of its best turn read with its neighbours, when embedded

    @property
    def start_seq(self) -> int:
        return self.turns[0].seq

    @property
    def end_seq(self) -> int:
        return self.turns[-1].seq

    @property
    def started_at(self) -> datetime:
        return self.turns[0].ts

    @property
    def ended_at(self) -> datetime:
        return self.turns[-1].ts

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t.role for t in self.turns))

    @property
    def text(self) -> str:
        return "\n".join(t.line for t in self.turns)


@dataclass(frozen=True)
class TurnSearch:
    """How to search: which signal (fused, text alone, vector alone), how to fuse, which
    weights of the index count (A: what turns say; B: their breadcrumbs and summary keys)."""
    signal: str = "fused"
    fusion: str = "score"
    weights: str = "AB"
    neighbour_weight: float = NEIGHBOUR_WEIGHT
    dense_weight: float = DENSE_WEIGHT
    before: int = BEFORE  # the turns a best turn is widened with
    after: int = AFTER
    session_penalty: float = SESSION_PENALTY
    time_boost: float = TIME_BOOST  # a turn inside the time the question names scores this much more

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS or self.fusion not in FUSIONS or not re.fullmatch(r"[ABCD]{1,4}", self.weights):
            raise ValueError(f"signal one of {SIGNALS}, fusion one of {FUSIONS}, weights of A-D, got {self}")


def _in_context(scores: dict[tuple, float], positions: dict[tuple, tuple[str, int]], weight: float
                ) -> dict[tuple[str, int], float]:
    """Each turn's lexical score read with its neighbours: its own plus `weight` times each
    neighbour's (a turn between two matching ones rises even when it matches nothing)."""
    by_pos: dict[tuple[str, int], float] = {}
    for key, score in scores.items():
        session, pos = positions[key]
        for offset, share in ((0, 1.0), (-1, weight), (1, weight)):
            spot = (session, pos + offset)
            by_pos[spot] = by_pos.get(spot, 0.0) + share * score
    return by_pos


def _normalized(scores: dict, top: int = CANDIDATES) -> dict:
    """Min-max over the best `top`: the best is 1, the last kept 0 (a lone score is 1)."""
    best = sorted(scores.values(), reverse=True)[:top]
    if not best:
        return {}
    high, low = best[0], best[-1]
    span = high - low
    return {k: (1.0 if span <= 0 else (v - low) / span) for k, v in scores.items() if v >= low}


def fuse(text: dict, vector: dict, how: TurnSearch) -> dict:
    """One score per turn from the lexical and dense ones: min-max normalized and weighted
    (`score`), or reciprocal rank fusion (`rrf`)."""
    if how.fusion == "rrf":
        fused: dict = {}
        for ranking in (text, vector):
            for rank, key in enumerate(sorted(ranking, key=lambda k: (-ranking[k], k)), start=1):
                fused[key] = fused.get(key, 0.0) + 1.0 / (RRF_K + rank)
        return fused
    lexical, dense = _normalized(text), _normalized(vector)
    return {k: (1 - how.dense_weight) * lexical.get(k, 0.0) + how.dense_weight * dense.get(k, 0.0)
            for k in set(lexical) | set(dense)}


def _windows(ranked: Sequence[tuple[str, int]], scores: dict, limit: int, before: int = BEFORE, after: int = AFTER,
             session_penalty: float = 0.0) -> list[tuple[str, int, int, list[tuple[str, int]]]]:
    """The best turns widened (2 before, 1 after) and merged per session where they overlap
    or touch, until there are `limit` passages. A turn that would open another passage of a
    session already holding n counts `(1 - session_penalty) ** n` of its score, so the
    passages are opened best first by that score; a turn inside or beside an open passage
    joins it at its own score. Turns ranked below the one that opened the last passage are
    not read."""
    passages: list[list] = []  # [session, lo, hi, [best turns]]
    opened: dict[str, int] = {}
    left = list(ranked)  # best first by their own score: a discounted one never beats a higher one
    while left and len(passages) < limit:
        pick, pick_score, joins = 0, -1.0, None
        for i, (session, pos) in enumerate(left):
            if scores[(session, pos)] <= pick_score:
                break  # every turn after this one scores lower, discounted or not
            lo, hi = max(0, pos - before), pos + after
            near = next((p for p in passages if p[0] == session and lo <= p[2] + 1 and hi >= p[1] - 1), None)
            score = scores[(session, pos)] * (1.0 if near else (1 - session_penalty) ** opened.get(session, 0))
            if score > pick_score:
                pick, pick_score, joins = i, score, near
        session, pos = left.pop(pick)
        lo, hi = max(0, pos - before), pos + after
        if joins is not None:
            joins[1], joins[2] = min(joins[1], lo), max(joins[2], hi)
            joins[3].append((session, pos))
        else:
            passages.append([session, lo, hi, [(session, pos)]])
            opened[session] = opened.get(session, 0) + 1
    # a widened passage may now touch another of its session: merge those too
    merged: list[list] = []
    for p in passages:
        for q in merged:
            if q[0] == p[0] and p[1] <= q[2] + 1 and p[2] >= q[1] - 1:
                q[1], q[2], q[3] = min(q[1], p[1]), max(q[2], p[2]), q[3] + p[3]
                break
        else:
            merged.append(p)
    return [(s, lo, hi, best) for s, lo, hi, best in merged]


def search_passages(conn: psycopg.Connection, text: str, *, user_id: str | None, all_users: bool,
                    vector: np.ndarray | None, model: str | None, limit: int = 5, how: TurnSearch = TurnSearch(),
                    session_id: str | None = None, since: datetime | None = None,
                    until: datetime | None = None, prefer: tuple[datetime, datetime] | None = None,
                    include_forks: bool = False) -> list[Passage]:
    """The best passages for `text`, best first. `vector` is the query's embedding (None:
    the lexical signal alone); `session_id` keeps one session, `since`/`until` a time;
    `prefer` boosts turns of a time (`TurnSearch.time_boost`) without leaving others out;
    forked sessions' turns only with `include_forks` (or their session named)."""
    scope = {"user_id": user_id, "all_users": all_users, "session_id": session_id, "since": since, "until": until,
             "include_forks": include_forks}
    statements = []
    if how.signal in ("fused", "text"):
        statements.append(("turn_text_search", {**scope, "text": text, "weights": how.weights, "k1": BM25_K1,
                                                 "b": BM25_B, "limit": CANDIDATES}))
    if how.signal in ("fused", "vector") and vector is not None:
        statements.append(("turn_vector_search", {**scope, "vector": vector, "model": model, "limit": CANDIDATES}))
    results = dict(zip((name for name, _ in statements), search_db.pipelined_rows(conn, statements), strict=True))
    lexical_rows = results.get("turn_text_search", [])
    vector_rows = results.get("turn_vector_search", [])
    positions = {(r["session_id"], r["seq"]): (r["session_id"], r["pos"]) for r in lexical_rows + vector_rows}
    owners = {r["session_id"]: r["user_id"] for r in lexical_rows + vector_rows}
    lexical = _in_context({(r["session_id"], r["seq"]): r["score"] for r in lexical_rows}, positions,
                          how.neighbour_weight)
    dense = {positions[(r["session_id"], r["seq"])]: 1 - r["distance"] for r in vector_rows}
    terms = {(r["session_id"], r["pos"]): tuple(r["matched"]) for r in lexical_rows}
    if how.signal == "text" or not dense:
        scores = lexical
    elif how.signal == "vector" or not lexical:
        scores = dense
    else:
        scores = fuse(lexical, dense, how)
    if prefer is not None:
        times = {(r["session_id"], r["pos"]): r["ts"] for r in lexical_rows + vector_rows}
        scores = {k: v * (1 + how.time_boost) if k in times and prefer[0] <= times[k] < prefer[1] else v
                  for k, v in scores.items()}
    ranked = sorted(scores, key=lambda k: (-scores[k], k))
    windows = _windows(ranked, scores, limit, how.before, how.after, how.session_penalty)
    if not windows:
        return []
    rows = turns_db.turn_windows(conn, [w[0] for w in windows], [w[1] for w in windows], [w[2] for w in windows],
                                 scope)
    turns: dict[str, list[Turn]] = {}
    for r in rows:
        turns.setdefault(r["session_id"], []).append(Turn(r["id"], r["session_id"], r["seq"], r["pos"], r["role"],
                                                          r["ts"], r["body"]))
    passages = []
    for session, lo, hi, best in windows:
        held = tuple(t for t in turns.get(session, []) if lo <= t.pos <= hi)
        if not held:
            continue
        top = max(best, key=lambda k: scores[k])
        best_turn = next((t for t in held if t.pos == top[1]), held[0])
        matched = tuple(sorted({term for k in best for term in terms.get(k, ())}))
        passages.append(Passage(owners.get(session, user_id or ""), session, held, best_turn.seq, scores[top],
                                matched, dense.get(top)))
    return passages


@dataclass
class Budget:
    """What an agent reads, counted in characters or in tokens (estimated as llm_calls
    estimates them); None: no limit. Hits take from it in the order they are served."""
    limit: int | None
    unit: str = "chars"
    used: int = 0

    def cost(self, text: str) -> int:
        return len(text) if self.unit == "chars" else estimate_tokens(text)

    def units(self, chars: int) -> int:
        """`chars` characters of Latin text in this budget's unit."""
        return chars if self.unit == "chars" else estimate_tokens("x" * chars)

    @property
    def room(self) -> int | None:
        return None if self.limit is None else self.limit - self.used

    def fits(self, text: str) -> bool:
        return self.room is None or self.cost(text) <= self.room

    def take(self, text: str) -> bool:
        """Spend on `text` if it fits whole."""
        if not self.fits(text):
            return False
        self.used += self.cost(text)
        return True


def _around_match(body: str, terms: Sequence[str], room: int) -> str:
    """About `room` characters of a turn's body around its first matching word: never its
    first characters blind when the match is further in."""
    if len(body) <= room:
        return body
    folded = body.casefold()
    hits = [i for i in (folded.find(t) for t in terms if t) if i >= 0]
    centre = min(hits) if hits else 0
    start = max(0, min(centre - room // 3, len(body) - room))
    piece = body[start:start + max(0, room - 2 * len(ELLIPSIS))]
    return (ELLIPSIS if start else "") + piece + (ELLIPSIS if start + len(piece) < len(body) else "")


MIN_TRIMMED_CHARS = 40  # a trimmed turn shorter than this says too little to serve
# What one passage may take of a budget while other passages wait: this share, or this many
# characters if more (a best turn and its nearest neighbours). Chosen on the labelled set
# among shares 0.2-0.5 and floors 240-450 (docs/benchmarks.md, budget by value).
PASSAGE_SHARE, PASSAGE_LEAST_CHARS = 0.2, 300


def fit_passage(passage: Passage, budget: Budget) -> Passage | None:
    """The passage within what is left of the budget: whole if it fits; else its best turn
    and as many of the turns around it, without gaps, as fit; the best turn alone cut
    around its match if even that is too long. None when not even a few words of it fit."""
    if budget.fits(passage.text):
        return passage
    turns = list(passage.turns)
    best = next(i for i, t in enumerate(turns) if t.seq == passage.best_seq)
    kept = [turns[best]]
    if not budget.fits(kept[0].line):
        label = len(kept[0].line) - len(kept[0].body)
        room = budget.room - budget.cost(kept[0].line[:label])
        while room >= MIN_TRIMMED_CHARS:
            cut = replace(kept[0], body=_around_match(kept[0].body, passage.terms, room))
            if budget.fits(cut.line):
                return replace(passage, turns=(cut,))
            room = int(room * 0.8)  # a token budget: estimated tokens may exceed characters / 4
        return None
    lo = hi = best  # grow outwards, the turn after first (an answer follows its question)
    growing = {1: True, -1: True}
    while any(growing.values()):
        for step in (1, -1):
            nxt = hi + 1 if step == 1 else lo - 1
            if not growing[step] or not 0 <= nxt < len(turns):
                growing[step] = False
                continue
            trial = turns[min(lo, nxt):max(hi, nxt) + 1]
            if budget.fits("\n".join(t.line for t in trial)):
                lo, hi = min(lo, nxt), max(hi, nxt)
            else:
                growing[step] = False
    return replace(passage, turns=tuple(turns[lo:hi + 1]))


def without_chatter(passage: Passage) -> Passage:
    """The passage without the greetings and echoes at its edges (`rules.noise.is_chatter`):
    a neighbour is kept only while it carries something; the best turn always stays."""
    turns = list(passage.turns)
    best = next(i for i, t in enumerate(turns) if t.seq == passage.best_seq)
    lo, hi = 0, len(turns) - 1
    while lo < best and is_chatter(turns[lo].body):
        lo += 1
    while hi > best and is_chatter(turns[hi].body):
        hi -= 1
    return passage if (lo, hi) == (0, len(turns) - 1) else replace(passage, turns=tuple(turns[lo:hi + 1]))


def fill_passages(passages: Sequence[Passage], budget: Budget, drop_chatter: bool = True) -> list[Passage]:
    """Passages within a budget, in their order: while others wait, each takes at most its
    share (`PASSAGE_SHARE` of the budget, or `PASSAGE_LEAST_CHARS` if more): whole when it
    fits in that, else its best turn and the neighbours that fit (`fit_passage`); the last
    takes what is left. One that cannot fit even trimmed is left out and the next is tried.
    A long passage no longer crowds out the rest: within 720 and 1,440 characters the
    labelled set's recall rose from 60.1% and 76.3% to 66.3% and 81.7%, in every category
    (docs/benchmarks.md, budget by value). Measured and left out: taking the shortest of
    passages of similar score first (recall fell at every budget), and serving every
    passage's best turn first, then their neighbours (the evidence is often the neighbour
    of the turn that matched best). With `drop_chatter`, greetings and echoes at a passage's
    edges are not served (`without_chatter`)."""
    served = []
    for number, p in enumerate(passages, start=1):
        p = without_chatter(p) if drop_chatter else p
        share = budget
        if budget.limit is not None and number < len(passages):
            least = budget.units(PASSAGE_LEAST_CHARS)
            share = Budget(min(budget.room, max(int(budget.limit * PASSAGE_SHARE), least)), budget.unit)
        fitted = fit_passage(p, share)
        if fitted is not None and budget.take(fitted.text):
            served.append(fitted)
    return served

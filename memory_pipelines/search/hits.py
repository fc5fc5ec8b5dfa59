"""What a search returns: hits, passages as hits, and what one search served."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import datetime

from memory_pipelines.passages import Budget, Passage, Turn
from memory_pipelines.records import ForkPoint
from memory_pipelines.timeexpr import TimeRange


@dataclass(frozen=True)
class MemoryHit:
    source_type: str  # fact | raw | sketch | knowledge | error
    text: str
    session_id: str | None
    timestamp: datetime | None
    score: float
    id: int | None = None
    user_id: str | None = None
    key: str | None = None
    category: str | None = None
    start_seq: int | None = None
    end_seq: int | None = None
    section: str | None = None
    kind: str | None = None
    breadcrumbs: tuple[str, ...] = ()
    similarity: float | None = None
    matched_terms: int | None = None
    superseded_by: str | None = None
    before_summary: bool = False
    context: tuple[dict, ...] = ()
    # a passage (raw hit of the turn index): its turns, first time, roles, the turn that
    # matched best and the query lexemes it holds
    turns: tuple[Turn, ...] = ()
    started_at: datetime | None = None
    roles: tuple[str, ...] = ()
    best_seq: int | None = None
    terms: tuple[str, ...] = ()
    # forest recall: the tree nodes descended to the passage's chunk, top first ("node: summary")
    path: tuple[str, ...] = ()
    fork: ForkPoint | None = None  # the hit's session is a fork: of which session, after which turn
    tags: tuple[str, ...] | None = None  # a knowledge entry's (`self`: what the person said of themselves)

    def to_json(self) -> dict:
        """Its fields, leaving out those it does not have (None)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    def as_passage(self) -> Passage:
        return Passage(self.user_id or "", self.session_id or "", self.turns, self.best_seq, self.score,
                       self.terms, self.similarity)


def passage_hit(passage: Passage) -> MemoryHit:
    return MemoryHit("raw", passage.text, passage.session_id, passage.ended_at, passage.score,
                     user_id=passage.user_id, start_seq=passage.start_seq, end_seq=passage.end_seq,
                     similarity=passage.similarity, matched_terms=len(passage.terms), turns=passage.turns,
                     started_at=passage.started_at, roles=passage.roles, best_seq=passage.best_seq,
                     terms=passage.terms)


def interleave_hits(rankings: Sequence[Sequence[MemoryHit]], limit: int) -> list[MemoryHit]:
    """The rankings' first hits, then their second ones, and so on (each part of a question
    gets its share), leaving out a passage that overlaps one already taken."""
    taken: list[MemoryHit] = []
    for rank in range(max((len(r) for r in rankings), default=0)):
        for ranking in rankings:
            if rank < len(ranking) and not any(_overlap(ranking[rank], t) for t in taken):
                taken.append(ranking[rank])
    return taken[:limit]


def _overlap(a: MemoryHit, b: MemoryHit) -> bool:
    return a.session_id == b.session_id and a.start_seq is not None and b.start_seq is not None \
        and a.start_seq <= b.end_seq and b.start_seq <= a.end_seq


@dataclass(frozen=True)
class ServedMemory:
    """What one search served within its budget."""
    hits: tuple[MemoryHit, ...]
    budget: Budget
    time_range: TimeRange | None  # the time the question named, which passages were kept to
    left_out: int  # hits found that did not fit the budget

    def to_json(self, text: str, scope: str) -> dict:
        """The search as JSON (what `search --json` prints and the API answers): times as
        ISO strings."""
        return json.loads(json.dumps({
            "query": text, "scope": scope, "budget": asdict(self.budget), "left_out": self.left_out,
            "time_range": asdict(self.time_range) if self.time_range else None,
            "hits": [h.to_json() for h in self.hits]}, ensure_ascii=False, default=str))

"""The search over every store: `MemorySearch` (each store's search, a module each) and
`UnifiedMemorySearch`, which serves them merged in tiers within a budget, raw excerpts
labelled with their freshness."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from memory_pipelines.db import search as search_db
from memory_pipelines.db import turns as turns_db
from memory_pipelines.core.fact_extraction import canonical_key
from memory_pipelines.core.knowledge_entries import Triple
from memory_pipelines.passages import Budget, TurnSearch, fill_passages
from memory_pipelines.records import DEFAULT_BUDGET_CHARS, SEARCH_SCOPES
from memory_pipelines.search.archive import ArchiveSearch
from memory_pipelines.search.base import Plan
from memory_pipelines.search.chunks import ChunkSearch
from memory_pipelines.search.facts import FactSearch
from memory_pipelines.search.freshness import outdated_by
from memory_pipelines.search.hits import MemoryHit, ServedMemory, interleave_hits
from memory_pipelines.search.entries import KnowledgeSearch, _entry_hit
from memory_pipelines.search.passages import PassageSearch
from memory_pipelines.search.questions import asks_about_person, in_first_person, question_parts
from memory_pipelines.search.sketches import SketchSearch
from memory_pipelines.timeexpr import TimeRange, time_range

SCOPES = SEARCH_SCOPES
# how passages are found: the flat turn index, or forest recall down the temporal tree
SEARCH_MODES = ("flat", "forest")
# a question is served what the person said of themselves first (`rules.self_statements`): this
# many of those entries at most, within this share of the budget; the passages come after.
# Chosen on the labelled set among shares 0.3-1.0 and 8-40 entries (docs/benchmarks.md)
SELF_ENTRIES, SELF_SHARE = 40, 0.7
# which questions are served the person's self statements first: those about their tastes and
# likely choices (`asks_about_person`), any in the first person ("how did my knee recover?"),
# every question, none
SELF_FIRST = ("person", "first-person", "always", "never")
# within this many characters best turns are served alone: measured better at 720 and 1,440,
# worse at 7,200 where the neighbours carry open-domain answers (docs/benchmarks.md)
ALONE_WITHIN_CHARS = 1440


@dataclass(frozen=True)
class ServePolicy:
    """How unified search spends a budget on passages; each choice measured on the labelled
    set, and each can be turned off to measure it again (`bench retrieval`'s ablation rows)."""
    how: TurnSearch = TurnSearch()  # includes the session penalty: passages spread over sessions
    split_questions: bool = True  # each part of a question searched on its own, the parts interleaved
    self_first: str = "first-person"  # which questions get the person's self statements first (SELF_FIRST)
    drop_chatter: bool = True  # greetings and echoes at a passage's edges are not served
    # a budget this tight (characters, or the tokens they make) serves best turns without their
    # neighbours (None: always widened)
    alone_within: int | None = ALONE_WITHIN_CHARS

    def how_within(self, budget: Budget) -> TurnSearch:
        """The turn search for this budget: best turns alone when it is tight."""
        if self.alone_within is not None and budget.limit is not None and budget.limit <= budget.units(self.alone_within):
            return replace(self.how, before=0, after=0)
        return self.how

    def __post_init__(self) -> None:
        if self.self_first not in SELF_FIRST:
            raise ValueError(f"self_first one of {', '.join(SELF_FIRST)}, got {self.self_first!r}")


class MemorySearch(FactSearch, ChunkSearch, PassageSearch, ArchiveSearch, SketchSearch, KnowledgeSearch):
    """Each store's search over one connection, scoped to one user (all users need `admin=True`)."""


class UnifiedMemorySearch(MemorySearch):
    """One query over every store, merged in tiers: facts (curated truth) first, then raw
    excerpts by relevance, then sketches; every hit with its provenance and freshness."""

    def search(self, text: str, scope: str = "all", k: int = 5, user_id: str | None = None,
               session_id: str | None = None, current_session_id: str | None = None,
               summary_at: datetime | None = None, budget_chars: int | None = DEFAULT_BUDGET_CHARS,
               budget_tokens: int | None = None, now: datetime | None = None,
               include_forks: bool = False, policy: ServePolicy = ServePolicy()) -> list[MemoryHit]:
        """The hits `serve` gives, in tier order."""
        return list(self.serve(text, scope, k, user_id, session_id, current_session_id, summary_at,
                               budget_chars=budget_chars, budget_tokens=budget_tokens, now=now,
                               include_forks=include_forks, policy=policy).hits)

    def serve(self, text: str, scope: str = "all", k: int = 5, user_id: str | None = None,
              session_id: str | None = None, current_session_id: str | None = None,
              summary_at: datetime | None = None, *, budget_chars: int | None = DEFAULT_BUDGET_CHARS,
              budget_tokens: int | None = None, now: datetime | None = None, mode: str = "flat",
              include_forks: bool = False, policy: ServePolicy = ServePolicy()) -> ServedMemory:
        """Every store in tiers, within a budget: facts, then passages, then sketches, then
        knowledge entries take from it in that order (`k` caps each store) until it is
        spent; a passage that does not fit whole is trimmed around its best turn
        (`passages.fill_passages`). The budget is in characters (default 6,000) or, given,
        in tokens (estimated as llm_calls estimates them); None for both: no limit. Turns
        of a time the question names ("in May", "last week", relative to `now`, default the
        user's newest turn) rank higher (`passages.TIME_BOOST`); passages of other times
        still come after them (keeping only that time measured worse: the answer to "where
        did I live in March" may lie in June). `mode="forest"` finds the passages by forest
        recall (`search_forest`) instead. Forked sessions' passages are served only with
        `include_forks` (flat mode), each labelled with its fork point, or when `session_id`
        names the fork. A question joining several parts ("what do A and B have in common")
        has each part searched too, their passages interleaved; what the person said of
        themselves comes before the passages, within `SELF_SHARE` of the budget (`ServePolicy`:
        short statements scattered over months answer "would I enjoy …" and "how did my knee
        recover" where whole turns would not fit)."""
        if scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}: use one of {', '.join(SCOPES)}")
        if mode not in SEARCH_MODES:
            raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(SEARCH_MODES)}")
        k = max(1, min(20, int(k)))
        budget = Budget(budget_tokens, "tokens") if budget_tokens is not None else Budget(budget_chars)
        self_first = scope == "all" and (policy.self_first == "always"
                                         or policy.self_first == "first-person" and in_first_person(text)
                                         or policy.self_first == "person" and asks_about_person(text))
        plans: dict[str, Plan] = {}  # in tier order; every store's statements in one round trip
        if scope in ("all", "facts"):
            plans["facts"] = self._facts(text, user_id, k)
        if scope in ("all", "sketches"):
            plans["sketches"] = self._sketches(text, user_id, session_id, current_session_id, k)
        if scope in ("all", "knowledge"):
            plans["knowledge"] = self._knowledge(text, user_id, current_session_id, None, k, None, None)
        if self_first:
            plans["self"] = self._self_entries(text, plans["knowledge"], SELF_ENTRIES)
        found = dict(zip(plans, self._resolve(*plans.values())))
        if self_first:  # each entry once, in the tier it comes first in
            found["knowledge"] = [h for h in found["knowledge"] if h.id not in {s.id for s in found["self"]}]
        named = None
        if scope in ("all", "raw"):
            named = self.named_time(text, user_id, now)
            if mode == "forest":
                raw = [h for h in self.search_forest(text, user_id, k if session_id is None else 20)
                       if session_id is None or h.session_id == session_id][:k]
            else:
                prefer = (named.since, named.until) if named else None
                parts = question_parts(text) if policy.split_questions else []
                raw = interleave_hits([self.search_passages(part, user_id, session_id, k, policy.how_within(budget),
                                                            prefer=prefer,
                                                            include_forks=include_forks)
                                       for part in (text, *parts)], k)
            found["raw"] = raw
        served, left_out = [], 0
        for tier in ("facts", "self", "raw", "sketches", "knowledge"):
            hits = found.get(tier, [])
            if tier == "self" and budget.limit is not None:  # at most its share: the passages come next
                share = Budget(min(budget.room, int(budget.limit * SELF_SHARE)), budget.unit)
                fitting = [h for h in hits if share.take(h.text)]
                left_out, hits = left_out + len(hits) - len(fitting), fitting
            if tier == "raw":
                packed = {(p.session_id, p.best_seq): p
                          for p in fill_passages([h.as_passage() for h in hits], budget, policy.drop_chatter)}
                kept = [(h, packed.get((h.session_id, h.best_seq))) for h in hits]
                # labelled as served: what a trimmed passage no longer holds does not date it
                served += self.mark_freshness([
                    replace(h, text=p.text, turns=p.turns, start_seq=p.start_seq, end_seq=p.end_seq,
                            started_at=p.started_at, timestamp=p.ended_at, roles=p.roles)
                    for h, p in kept if p is not None], user_id, current_session_id, summary_at)
                left_out += sum(p is None for _, p in kept)
                continue
            if tier == "knowledge" and scope == "all":
                hits = self._decisions_of(served, user_id, hits, k)
            for hit in hits:
                if budget.take(hit.text):
                    served.append(hit)
                else:
                    left_out += 1
        self._count_access(served)
        return ServedMemory(tuple(served), budget, named, left_out)

    def _decisions_of(self, served: Sequence[MemoryHit], user_id: str | None, entries: list[MemoryHit],
                      k: int) -> list[MemoryHit]:
        """The knowledge tier with, first, what each served passage's conversation settled
        next: the first decision (an instruction entry) its session distilled from a turn
        after the passage. The answer to "how long do we cache …" is often the user's
        decision a few turns after the question matched best, and it is one line ("let's do
        120s as a compromise")."""
        passages = [h for h in served if h.source_type == "raw" and h.turns]
        if user_id is None or not passages:
            return entries
        rows, triples = self._fetch([
            ("session_decisions", {"user_id": user_id, "session_ids": list(dict.fromkeys(h.session_id for h in passages)),
                                   "at": datetime.now().astimezone()}),
            ("graph_statements", {"user_ids": [user_id], "all_users": False})])
        triples = [Triple(**row) for row in triples]
        decisions: dict[int, MemoryHit] = {}
        for passage in passages:
            after = [r for r in rows if r["session_id"] == passage.session_id and r["seq_start"] is not None
                     and r["seq_start"] > passage.end_seq]
            if nearest := min(after, key=lambda r: (r["seq_start"], r["id"]), default=None):
                decisions.setdefault(nearest["id"], _entry_hit(nearest, (), triples))
        chosen = sorted(decisions.values(), key=lambda h: h.superseded_by is not None)  # stable
        return (chosen + [h for h in entries if h.id not in decisions])[:max(k, len(chosen))]

    def named_time(self, text: str, user_id: str | None, now: datetime | None) -> TimeRange | None:
        """The time the question names, relative to `now` (default: the user's newest turn)."""
        if time_range(text, now or datetime.now().astimezone()) is None:
            return None  # it names none: no need to ask when the user last spoke
        if now is None:
            now = turns_db.newest_turn(self.conn, self._scope(user_id))
        return time_range(text, now) if now is not None else None

    def _count_access(self, hits: Sequence[MemoryHit]) -> None:
        """Every hit counts as an access, and every turn of a served passage: decay gives
        often-used memories a boost."""
        search_db.count_access(self.conn, [h.id for h in hits if h.source_type == "fact"],
                               [h.id for h in hits if h.source_type == "knowledge"],
                               [t.id for h in hits if h.source_type == "raw" for t in h.turns])

    def mark_freshness(self, raw: list[MemoryHit], user_id: str | None, current_session_id: str | None = None,
                       summary_at: datetime | None = None) -> list[MemoryHit]:
        """An excerpt is `superseded_by` a newer statement about the same subject as one its
        turns made, named (`outdated_by`); one older than its session's last summary is
        `before_summary`. Both are still returned, labelled."""
        if not raw:
            return raw
        oldest = min((h.timestamp for h in raw if h.timestamp is not None), default=None)
        sessions = sorted({h.session_id for h in raw})
        users = sorted({h.user_id for h in raw if h.user_id})
        facts, items, closed, triples, summaries = self._fetch([
            ("newer_facts_for_users", {"user_ids": users, "since": oldest or datetime.max.replace(tzinfo=UTC)}),
            ("fact_items_of_sessions", {"session_ids": sessions}),
            ("closed_statements_of_sessions", {"session_ids": sessions}),
            ("graph_statements", {"user_ids": users, "all_users": False}),
            ("summary_cursors", {"session_ids": sessions})])
        triples = [Triple(**row) for row in triples]
        current = {(f["user_id"], canonical_key(f["key"])): f for f in facts}
        cursors = {r["session_id"]: r["cursor_ts"] for r in summaries}
        if current_session_id and summary_at is not None:
            cursors[current_session_id] = summary_at
        marked = []
        for hit in raw:
            cursor = cursors.get(hit.session_id)
            marked.append(replace(hit, superseded_by=outdated_by(hit, items, closed, current, triples),
                                  before_summary=cursor is not None and hit.timestamp is not None
                                  and hit.timestamp <= cursor))
        return marked

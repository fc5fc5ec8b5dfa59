"""Unified memory search: one read path over facts, raw chunks (and the whole message
archive), sketches — the navi design, served from the materialized tables.

Every search is scoped to one user; reading across users needs `admin=True`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime

import numpy as np
import psycopg
from memory_pipelines.db.vectors import register_vector_types
from psycopg.rows import dict_row

from memory_pipelines.config import DecaySettings
from memory_pipelines.db import repository
from memory_pipelines.db.queries import query
from memory_pipelines.embed import Embedder, EmbeddingError
from memory_pipelines.facts import canonical_key
from memory_pipelines.knowledge import DECAY_FORMULA, Triple, overriding, superseded_by
from memory_pipelines.lifecycle import user_clocks
from memory_pipelines.records import DEFAULT_BUDGET_CHARS, SEARCH_SCOPES, ForkPoint
from memory_pipelines.passages import (
    AFTER, BEFORE, Budget, Passage, Turn, TurnSearch, fill_passages, search_passages,
)
from memory_pipelines.timeexpr import TimeRange, time_range
from memory_pipelines.tree import FOREST_BEAM, descend
from memory_pipelines.turns import Citation, ScoredTurn, TurnCandidate, score_turns
from memory_pipelines.rules.text import ALL_STOPWORDS, clip

log = logging.getLogger(__name__)

FACT_MAX_DISTANCE = 0.3
CHUNK_MAX_DISTANCE = 0.45
RECALL_MIN_SIMILARITY = 0.55
RECALL_MIN_TERMS = 2
RECALL_LEDGER_SIZE = 100
MAX_QUERY_CHARS = 1000
MAX_TERMS = 16
# Chunk full-text candidates kept per hit wanted: ranked in SQL before any content is read.
TEXT_CANDIDATES_PER_HIT = 2
SCOPES = SEARCH_SCOPES
# how passages are found: the flat turn index, or forest recall down the temporal tree
SEARCH_MODES = ("flat", "forest")
# the turn index's passages forest recall scores the nodes by and serves from
FOREST_CANDIDATES = 40
_TERM = re.compile(r"\w+", re.UNICODE)


class AccessDenied(PermissionError):
    pass


@dataclass(frozen=True)
class EmbedderMismatch:
    """The stored vectors were made with another model than the configured embedder: until
    the next run re-embeds them, search ranks by text alone."""
    configured: str
    stored: tuple[str, ...]

    @property
    def message(self) -> str:
        return (f"stored vectors were made with {', '.join(self.stored)}, the configured embedder is "
                f"{self.configured}: searching by text until `memory-pipelines run` re-embeds them")


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


@dataclass(frozen=True)
class Plan:
    """A store's search as statements (name, params) and what makes hits of their rows."""
    statements: tuple[tuple[str, dict], ...]
    hits: Callable[[list[list[dict]]], list[MemoryHit]]


def normalize_query(text: str) -> str:
    """Queries are data: cut to 1,000 characters and reduced to words for text matching."""
    return " ".join(_TERM.findall(text[:MAX_QUERY_CHARS]))


def query_terms(text: str) -> list[str]:
    words = [w.casefold() for w in _TERM.findall(text[:MAX_QUERY_CHARS])]
    terms = [w for w in dict.fromkeys(words) if w not in ALL_STOPWORDS and (len(w) > 1 or w.isdigit())]
    return terms[:MAX_TERMS]


def _escape_like(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _patterns(terms: Sequence[str]) -> list[str]:
    return [f"%{_escape_like(t)}%" for t in terms]


def _tsquery(terms: Sequence[str], prefix: bool = False) -> str:
    # terms are \w+ only, so the OR query cannot carry tsquery syntax; no terms: an empty
    # query, which matches nothing
    return " | ".join(t + ":*" if prefix else t for t in terms)


def _terms_hit(text: str, terms: Sequence[str]) -> int:
    folded = text.casefold()
    return sum(1 for t in terms if t in folded)


class MemorySearch:
    def __init__(self, conn: psycopg.Connection, embedder: Embedder | None = None, *, admin: bool = False):
        self.conn, self.embedder, self.admin = conn, embedder, admin
        self._last_vector: tuple[str, np.ndarray] | None = None  # one query embeds once across the stores
        self._vectors_usable: dict[str | None, bool] = {}  # per user: stored vectors are the embedder's
        self.warnings: list[EmbedderMismatch] = []
        if embedder is not None:
            register_vector_types(conn)  # a connection from outside the pool may not know the type yet

    # --- scoping --------------------------------------------------------------------

    def _scope(self, user_id: str | None) -> dict:
        if user_id is None and not self.admin:
            raise AccessDenied("searching without a user needs admin=True")
        return {"user_id": user_id, "all_users": user_id is None}

    def _vectors_match(self, user_id: str | None) -> bool:
        """Whether the user's stored vectors are the configured embedder's; if not, say so
        once and search by text (vectors of two models are not comparable)."""
        if user_id not in self._vectors_usable:
            other = tuple(r[0] for r in self.conn.execute(query("other_embedding_models"), {
                **self._scope(user_id), "model": self.embedder.model_id}))
            if other:
                mismatch = EmbedderMismatch(self.embedder.model_id, other)
                self.warnings.append(mismatch)
                log.info("search: %s", mismatch.message)
            self._vectors_usable[user_id] = not other
        return self._vectors_usable[user_id]

    def _vector(self, text: str, user_id: str | None) -> np.ndarray | None:
        if self.embedder is None or not text.strip() or not self._vectors_match(user_id):
            return None
        text = text[:MAX_QUERY_CHARS]
        if self._last_vector is not None and self._last_vector[0] == text:
            return self._last_vector[1]
        try:
            vector = np.asarray(self.embedder.embed([text])[0], dtype=np.float32)
        except EmbeddingError:
            return None  # the text paths still answer
        self._last_vector = (text, vector)
        return vector

    def _rows(self, name: str, params: dict) -> list[dict]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            return cur.execute(query(name), params).fetchall()

    def _fetch(self, statements: Sequence[tuple[str, dict]]) -> list[list[dict]]:
        """Statements sent together in one pipeline: one round trip instead of one each,
        which on a busy server costs more than these small queries themselves."""
        with self.conn.pipeline():
            cursors = [self.conn.cursor(row_factory=dict_row).execute(query(name), params)
                       for name, params in statements]
        return [cur.fetchall() for cur in cursors]

    def _resolve(self, *plans: Plan) -> list[list[MemoryHit]]:
        """The plans' statements in one round trip, then each plan's rows made into hits."""
        results = iter(self._fetch([statement for plan in plans for statement in plan.statements]))
        return [plan.hits([next(results) for _ in plan.statements]) for plan in plans]

    # --- facts ----------------------------------------------------------------------

    def search_facts(self, text: str, user_id: str | None, limit: int = 15) -> list[MemoryHit]:
        """Vector first (cosine distance below 0.3), then ILIKE over category, key, value."""
        return self._resolve(self._facts(text, user_id, limit))[0]

    def _facts(self, text: str, user_id: str | None, limit: int) -> Plan:
        # both statements are sent at once; the text rows count only without a vector hit
        scope = self._scope(user_id)
        vector = self._vector(text, user_id)
        terms = query_terms(text)
        statements = []
        if vector is not None:
            statements.append(("fact_vector_search", {**scope, "vector": vector, "model": self.embedder.model_id,
                                                      "limit": limit}))
        if terms:
            statements.append(("fact_text_search", {**scope, "patterns": _patterns(terms), "scan_limit": limit * 10}))

        def hits(results: list[list[dict]]) -> list[MemoryHit]:
            if vector is not None:
                near = [self._fact_hit(r, 1 - r["distance"], None) for r in results.pop(0)
                        if r["distance"] < FACT_MAX_DISTANCE]
                if near:
                    return near
            if not terms:
                return []
            scored = [(self._terms(r, terms), r) for r in results[0]]
            scored.sort(key=lambda x: (-x[0], -x[1]["last_verified_at"].timestamp()))
            return [self._fact_hit(r, float(n), n) for n, r in scored[:limit]]

        return Plan(tuple(statements), hits)

    @staticmethod
    def _terms(row: dict, terms: Sequence[str]) -> int:
        return _terms_hit(f"{row['category']} {row['key']} {row['value']}".replace("_", " "), terms)

    @staticmethod
    def _fact_hit(row: dict, score: float, matched: int | None) -> MemoryHit:
        return MemoryHit("fact", f"{row['key']}: {row['value']}", row["session_id"], row["last_verified_at"], score,
                         id=row["id"], user_id=row["user_id"], key=row["key"], category=row["category"],
                         start_seq=row["seq_start"], end_seq=row["seq_end"],
                         similarity=score if matched is None else None, matched_terms=matched)

    # --- raw chunks -----------------------------------------------------------------

    def search_chunks(self, text: str, user_id: str | None, session_id: str | None = None, limit: int = 8,
                      mode: str = "hybrid", *, breadcrumbs: bool = True, include_forks: bool = False) -> list[MemoryHit]:
        """Raw chunks for a query. `hybrid` (the default, it measured best: see README):
        vector and text rankings fused by reciprocal rank, keeping hits that match a term or
        lie within the vector cutoff; `tiered` (navi): vector first (cosine distance below
        0.45), else text; `vector` and `text` alone for comparison. The text path takes
        full-text candidates (any term) from the index and scores them by terms hit over
        content and breadcrumbs; `breadcrumbs=False` scores content alone there (`bench
        retrieval` measures what they add). One statement serves both paths. An empty query
        returns the most recent chunks. Forked sessions' chunks only with `include_forks`
        (or their session named)."""
        return self._resolve(self._chunks(text, user_id, session_id, limit, mode, breadcrumbs, include_forks))[0]

    def _chunks(self, text: str, user_id: str | None, session_id: str | None, limit: int, mode: str,
                breadcrumbs: bool = True, include_forks: bool = False) -> Plan:
        scope = {**self._scope(user_id), "session_id": session_id, "include_forks": include_forks}
        terms = query_terms(text)
        if not terms and not normalize_query(text):
            return Plan((("recent_chunks", {**scope, "limit": limit}),),
                        lambda results: [self._chunk_hit(r, 0.0, None, 0) for r in results[0]])
        wide = limit * 4 if mode == "hybrid" else limit
        vector = self._vector(text, user_id) if mode != "text" else None
        params = {**scope, "match": _tsquery(terms, prefix=True), "rank": _tsquery(terms),
                  "vector": vector, "model": self.embedder.model_id if vector is not None else None,
                  "vector_limit": wide if vector is not None else 0,
                  "text_limit": wide * TEXT_CANDIDATES_PER_HIT if mode != "vector" and terms else 0}

        def hits(results: list[list[dict]]) -> list[MemoryHit]:
            rows = results[0]
            vector_hits = [self._chunk_hit(r, 1 - r["distance"], 1 - r["distance"], None) for r in rows
                           if r["vector_rank"] is not None
                           and (mode != "tiered" or r["distance"] < CHUNK_MAX_DISTANCE)]
            if mode == "vector" or (mode == "tiered" and vector_hits):
                return vector_hits[:limit]
            text_hits = self._chunk_text(rows, terms, wide, breadcrumbs)
            if mode in ("tiered", "text"):
                return text_hits[:limit]
            fused = fuse_rrf([vector_hits, text_hits])
            return [h for h in fused if (h.matched_terms or 0) > 0
                    or (h.similarity or 0) >= 1 - CHUNK_MAX_DISTANCE][:limit]

        return Plan((("chunk_search", params),), hits)

    def _chunk_text(self, rows: Sequence[dict], terms: Sequence[str], limit: int,
                    breadcrumbs: bool) -> list[MemoryHit]:
        """The full-text candidates ranked by terms hit in content and breadcrumbs, then by
        their rank in SQL. Without breadcrumbs, a row the query found only through them
        scores 0 and leaves."""
        scored = []
        for row in rows:
            if row["text_rank"] is not None:
                hit = _terms_hit(row["content"] + (" " + " ".join(row["breadcrumbs"]) if breadcrumbs else ""), terms)
                scored.append((hit, row["text_rank"], row))
        scored.sort(key=lambda x: (-x[0], x[1]))
        return [self._chunk_hit(r, float(n), None, n) for n, _, r in scored[:limit] if n > 0]

    @staticmethod
    def _chunk_hit(row: dict, score: float, similarity: float | None, matched: int | None) -> MemoryHit:
        return MemoryHit("raw", row["content"], row["session_id"], row["ended_at"], score, id=row["id"],
                         user_id=row["user_id"], start_seq=row["start_seq"], end_seq=row["end_seq"],
                         breadcrumbs=tuple(row["breadcrumbs"]), similarity=similarity, matched_terms=matched)

    def search_passages(self, text: str, user_id: str | None, session_id: str | None = None, limit: int = 5,
                        how: TurnSearch = TurnSearch(), since: datetime | None = None,
                        until: datetime | None = None, prefer: tuple[datetime, datetime] | None = None,
                        include_forks: bool = False) -> list[MemoryHit]:
        """Passages of the turn index, best first (memory_pipelines.passages): BM25 and the
        turn embeddings fused, best turns widened with their neighbours, adjacent ones merged.
        With `include_forks`, forked sessions' passages too, each labelled with its fork point."""
        scope = self._scope(user_id)
        text = text[:MAX_QUERY_CHARS].replace("\x00", " ")  # PostgreSQL text cannot hold NUL
        vector = self._vector(text, user_id) if how.signal != "text" else None
        passages = search_passages(self.conn, text, user_id=user_id, all_users=scope["all_users"], vector=vector,
                                   model=self.embedder.model_id if vector is not None else None, limit=limit,
                                   how=how, session_id=session_id, since=since, until=until, prefer=prefer,
                                   include_forks=include_forks)
        hits = [passage_hit(p) for p in passages]
        if not hits or not (include_forks or session_id is not None):
            return hits  # no fork's turn can be among them: no lookup
        forks = repository.fork_points(self.conn, sorted({h.session_id for h in hits}))
        return [replace(h, fork=forks[h.session_id]) if h.session_id in forks else h for h in hits]

    def search_forest(self, text: str, user_id: str, limit: int = 5, how: TurnSearch = TurnSearch(),
                      beam: int = FOREST_BEAM) -> list[MemoryHit]:
        """Forest recall (memory_pipelines.tree.descend): the query matched against the
        user's scene tree top down (a node by the best of the turn index's hits among its
        turns and the query words its summary holds), the best children kept level by level
        into session trees down to chunk leaves; the passages served are those hits inside
        the leaves reached (best leaf first), each with its path of node summaries."""
        if user_id is None:
            raise AccessDenied("forest recall descends one user's trees: name the user")
        text = text[:MAX_QUERY_CHARS].replace("\x00", " ")
        candidates = self.search_passages(text, user_id, limit=FOREST_CANDIDATES, how=how)
        top = max((h.score for h in candidates), default=0.0) or 1.0
        by_session: dict[str, list[tuple[int, float]]] = {}
        for hit in candidates:
            by_session.setdefault(hit.session_id, []).append((hit.best_seq, hit.score / top))
        paths = descend(repository.user_tree_nodes(self.conn, user_id), set(query_terms(text)), beam, by_session)
        hits, taken = [], set()
        for path in paths:
            [span] = path[-1].spans
            provenance = tuple(f"{n.node_key}: {clip(n.summary, 100)}" for n in path)
            for i, hit in enumerate(candidates):
                if i not in taken and hit.session_id == span.session_id and \
                        span.seq_start <= (hit.best_seq or -1) <= span.seq_end:
                    taken.add(i)
                    hits.append(replace(hit, path=provenance))
        return hits[:limit]

    def matching_window(self, hit: MemoryHit, text: str) -> MemoryHit:
        """A chunk hit as the window of its turns that matches: the turn sharing the most
        query terms (the first of equals), 2 before and 1 after, never the chunk's first
        characters. The chunk's id stays (the recall ledger counts chunks)."""
        rows = self._rows("chunk_turns", {"session_id": hit.session_id, "user_id": hit.user_id,
                                          "first": hit.start_seq, "last": hit.end_seq})
        if not rows:
            return hit
        terms = query_terms(text)
        best = max(range(len(rows)), key=lambda i: (_terms_hit(rows[i]["body"], terms), -i))
        turns = tuple(Turn(r["id"], r["session_id"], r["seq"], r["pos"], r["role"], r["ts"], r["body"])
                      for r in rows[max(0, best - BEFORE):best + AFTER + 1])
        return replace(hit, text="\n".join(t.line for t in turns), start_seq=turns[0].seq, end_seq=turns[-1].seq,
                       turns=turns, started_at=turns[0].ts, timestamp=turns[-1].ts,
                       roles=tuple(dict.fromkeys(t.role for t in turns)), best_seq=rows[best]["seq"])

    def search_archive(self, text: str, user_id: str | None, limit: int = 8) -> list[MemoryHit]:
        """Keyword search over every archived message, widened to its neighbours."""
        terms = query_terms(text)
        if not terms:
            return []
        rows = self._rows("archive_text_search", {**self._scope(user_id), "tsquery": _tsquery(terms),
                                                  "limit": limit})
        hits = [MemoryHit("raw", f"{r['role'].capitalize()}: {r['content']}", r["session_id"], r["ts"],
                          float(_terms_hit(r["content"], terms)), user_id=r["user_id"], start_seq=r["seq"],
                          end_seq=r["seq"], matched_terms=_terms_hit(r["content"], terms)) for r in rows]
        return [self.widen(h) for h in hits]

    def widen(self, hit: MemoryHit, before: int = 2, after: int = 1) -> MemoryHit:
        """A raw hit with the 2 messages before it and the 1 after it (the Agenvoy design)."""
        if hit.start_seq is None or hit.session_id is None:
            return hit
        rows = self._rows("message_context", {"session_id": hit.session_id, "user_id": hit.user_id,
                                              "first": hit.start_seq - before, "last": hit.end_seq + after})
        return replace(hit, context=tuple(rows))

    # --- sketches -------------------------------------------------------------------

    def search_sketches(self, text: str, user_id: str | None, session_id: str | None = None,
                        current_session_id: str | None = None, limit: int = 5) -> list[MemoryHit]:
        """ILIKE over key, value and section; the current session's notes first."""
        return self._resolve(self._sketches(text, user_id, session_id, current_session_id, limit))[0]

    def _sketches(self, text: str, user_id: str | None, session_id: str | None, current_session_id: str | None,
                  limit: int) -> Plan:
        terms = query_terms(text)
        params = {**self._scope(user_id), "session_id": session_id, "current_session_id": current_session_id,
                  "patterns": _patterns(terms), "limit": limit}
        return Plan((("sketch_search", params),), lambda results: [
            MemoryHit("sketch", f"{r['key']}: {r['value']}", r["session_id"], r["updated_at"],
                      float(_terms_hit(f"{r['section']} {r['key']} {r['value']}", terms)), id=r["id"],
                      user_id=r["user_id"], key=r["key"], section=r["section"]) for r in results[0]])


    # --- knowledge entries and error memory --------------------------------------------

    def search_knowledge(self, text: str, user_id: str | None, session_id: str | None = None,
                         process: str | None = None, limit: int = 5, consent: str | None = None,
                         at: datetime | None = None) -> list[MemoryHit]:
        """Hybrid (vector and full text fused by reciprocal rank) over the entries in scope:
        the user's, a process's when named, and global ones; expired entries leave."""
        return self._resolve(self._knowledge(text, user_id, session_id, process, limit, consent, at))[0]

    def _knowledge(self, text: str, user_id: str | None, session_id: str | None, process: str | None, limit: int,
                   consent: str | None, at: datetime | None) -> Plan:
        scope = self._scope(user_id)
        terms = query_terms(text)
        vector = self._vector(text, user_id)
        params = {**scope, "session_id": session_id, "process": process, "consent": consent,
                  "at": at or datetime.now().astimezone(), "tsquery": _tsquery(terms),
                  "model": self.embedder.model_id if vector is not None else None,
                  "vector": vector if vector is not None else np.zeros(1, dtype=np.float32)}
        statements = (("knowledge_search", params),
                      ("graph_statements", {"all_users": scope["all_users"], "user_ids": [user_id]}))
        return Plan(statements, lambda results: self._knowledge_hits(
            results[0], [Triple(**row) for row in results[1]], terms, limit))

    @staticmethod
    def _knowledge_hits(rows: list[dict], triples: Sequence[Triple], terms: Sequence[str],
                        limit: int) -> list[MemoryHit]:
        """Hybrid ranking, then current entries before outdated ones: an entry stating a
        graph statement that a newer one closed is `superseded_by` it (still returned)."""
        hits = {r["id"]: _entry_hit(r, terms, triples) for r in rows}
        by_vector = sorted((h for h in hits.values() if h.similarity is not None), key=lambda h: (-h.similarity, h.id))
        by_text = sorted((h for h in hits.values() if h.matched_terms), key=lambda h: (-h.matched_terms, h.id))
        fused = fuse_rrf([by_vector[: limit * 4], by_text[: limit * 4]]) if terms else by_vector
        kept = [h for h in fused if h.matched_terms or (h.similarity or 0) >= 1 - CHUNK_MAX_DISTANCE][:limit]
        return sorted(kept, key=lambda h: h.superseded_by is not None)  # stable: relevance order within each

    def search_errors(self, text: str, user_id: str, limit: int = 5) -> list[MemoryHit]:
        """Resolved tool errors like this one; every hit renews its 90-day TTL."""
        terms = query_terms(text)
        if not terms:
            return []
        rows = self._rows("error_search", {"user_id": user_id, "patterns": _patterns(terms), "limit": limit,
                                           "now": datetime.now().astimezone()})
        return [MemoryHit("error", f"{r['tool']}: {r['error']}\nfix: {r['fix']}", r["session_id"], r["observed_at"],
                          float(_terms_hit(r["error"] + r["fix"], terms)), id=r["id"], user_id=r["user_id"],
                          key=r["tool"], start_seq=r["error_seq"], end_seq=r["fix_seq"])
                for r in sorted(rows, key=lambda r: r["observed_at"], reverse=True)]


def _entry_hit(r: dict, terms: Sequence[str], triples: Sequence[Triple]) -> MemoryHit:
    # rules-made entries repeat their title in the content
    text = r["content"] if r["content"].casefold().startswith(r["title"].casefold()) else f"{r['title']}: {r['content']}"
    return MemoryHit(
        "knowledge", text, r["session_id"], r["updated_at"], 0.0, id=r["id"], user_id=r["user_id"],
        key=r["entry_key"], kind=r["kind"], category=r["scope"], start_seq=r["seq_start"],
        end_seq=r["seq_end"], similarity=1 - r["distance"] if r["distance"] is not None else None,
        matched_terms=_terms_hit(f"{r['title']} {r['content']}", terms),
        superseded_by=superseded_by(f"{r['title']} {r['content']}", r["user_id"], r["updated_at"], triples))


def fuse_rrf(rankings: Sequence[Sequence[MemoryHit]], k: int = 60) -> list[MemoryHit]:
    """Reciprocal rank fusion (as navra's knowledge_search): score = sum of 1 / (k + rank).
    A hit found by both rankings keeps its similarity and its matched terms."""
    scores: dict[int, float] = {}
    merged: dict[int, MemoryHit] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (k + rank)
            seen = merged.get(hit.id)
            merged[hit.id] = hit if seen is None else replace(
                seen, similarity=seen.similarity if seen.similarity is not None else hit.similarity,
                matched_terms=seen.matched_terms if seen.matched_terms is not None else hit.matched_terms)
    return [replace(merged[i], score=scores[i]) for i in sorted(scores, key=lambda i: (-scores[i], i))]


class UnifiedMemorySearch(MemorySearch):
    """One query over every store, merged in tiers: facts (curated truth) first, then raw
    excerpts by relevance, then sketches; every hit with its provenance and freshness."""

    def search(self, text: str, scope: str = "all", k: int = 5, user_id: str | None = None,
               session_id: str | None = None, current_session_id: str | None = None,
               summary_at: datetime | None = None, budget_chars: int | None = DEFAULT_BUDGET_CHARS,
               budget_tokens: int | None = None, now: datetime | None = None,
               include_forks: bool = False) -> list[MemoryHit]:
        """The hits `serve` gives, in tier order."""
        return list(self.serve(text, scope, k, user_id, session_id, current_session_id, summary_at,
                               budget_chars=budget_chars, budget_tokens=budget_tokens, now=now,
                               include_forks=include_forks).hits)

    def serve(self, text: str, scope: str = "all", k: int = 5, user_id: str | None = None,
              session_id: str | None = None, current_session_id: str | None = None,
              summary_at: datetime | None = None, *, budget_chars: int | None = DEFAULT_BUDGET_CHARS,
              budget_tokens: int | None = None, now: datetime | None = None, mode: str = "flat",
              include_forks: bool = False) -> ServedMemory:
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
        names the fork."""
        if scope not in SCOPES:
            raise ValueError(f"unknown scope {scope!r}: use one of {', '.join(SCOPES)}")
        if mode not in SEARCH_MODES:
            raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(SEARCH_MODES)}")
        k = max(1, min(20, int(k)))
        budget = Budget(budget_tokens, "tokens") if budget_tokens is not None else Budget(budget_chars)
        plans: dict[str, Plan] = {}  # in tier order; every store's statements in one round trip
        if scope in ("all", "facts"):
            plans["facts"] = self._facts(text, user_id, k)
        if scope in ("all", "sketches"):
            plans["sketches"] = self._sketches(text, user_id, session_id, current_session_id, k)
        if scope in ("all", "knowledge"):
            plans["knowledge"] = self._knowledge(text, user_id, current_session_id, None, k, None, None)
        found = dict(zip(plans, self._resolve(*plans.values())))
        named = None
        if scope in ("all", "raw"):
            named = self.named_time(text, user_id, now)
            if mode == "forest":
                raw = [h for h in self.search_forest(text, user_id, k if session_id is None else 20)
                       if session_id is None or h.session_id == session_id][:k]
            else:
                raw = self.search_passages(text, user_id, session_id, k,
                                           prefer=(named.since, named.until) if named else None,
                                           include_forks=include_forks)
            found["raw"] = raw
        served, left_out = [], 0
        for tier in ("facts", "raw", "sketches", "knowledge"):
            hits = found.get(tier, [])
            if tier == "raw":
                packed = {(p.session_id, p.best_seq): p for p in fill_passages([h.as_passage() for h in hits], budget)}
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
            now = self.conn.execute(query("newest_turn"), self._scope(user_id)).fetchone()[0]
        return time_range(text, now) if now is not None else None

    def _count_access(self, hits: Sequence[MemoryHit]) -> None:
        """Every hit counts as an access, and every turn of a served passage: decay gives
        often-used memories a boost."""
        statements = [(name, {"ids": ids}) for source, name in (("fact", "count_fact_access"),
                                                                   ("knowledge", "count_knowledge_access"))
                      if (ids := [h.id for h in hits if h.source_type == source])]
        if turn_ids := [t.id for h in hits if h.source_type == "raw" for t in h.turns]:
            statements.append(("count_turn_access", {"ids": turn_ids}))
        if statements:
            with self.conn.pipeline():  # one round trip
                for name, params in statements:
                    self.conn.execute(query(name), params)

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


def outdated_by(hit: MemoryHit, items: Sequence[dict], closed: Sequence[dict], current: dict[tuple, dict],
                triples: Sequence[Triple] = ()) -> str | None:
    """The newest statement that replaced one the excerpt made about the same subject: a
    fact item of a turn it holds whose fact (the same key) now holds another value, seen
    after the excerpt; a graph statement of its turns another closed (the same subject and
    relation); or a closed graph statement its text states (subject and old object, as a
    knowledge entry is judged: `knowledge.superseded_by`). An excerpt that names the newer
    value itself states the change: current. None when nothing it said was replaced
    (sharing words with a newer fact is not enough: a fact of another subject from the same
    session does not date it)."""
    if hit.timestamp is None:
        return None
    folded = hit.text.casefold()
    newer: list[tuple[datetime, str]] = []
    if old := overriding(hit.text, hit.user_id, hit.timestamp, triples):
        newer.append((old.valid_until, f"{old.subject} {old.relation} {old.closed_by_object}"))
    for item in items:
        if item["session_id"] != hit.session_id or not hit.start_seq <= item["seq"] <= hit.end_seq:
            continue
        fact = current.get((hit.user_id, canonical_key(item["key"])))
        if (fact is not None and fact["last_verified_at"] > hit.timestamp
                and fact["value"].strip().casefold() != str(item["value"]).strip().casefold()
                and fact["value"].strip().casefold() not in folded):
            newer.append((fact["last_verified_at"], f"{fact['key']}: {fact['value']}"))
    for statement in closed:
        if (statement["session_id"] == hit.session_id and statement["seq_start"] <= hit.end_seq
                and statement["seq_end"] >= hit.start_seq and statement["valid_until"] > hit.timestamp
                and statement["newer_object"].casefold() not in folded):
            newer.append((statement["valid_until"],
                          f"{statement['subject']} {statement['relation']} {statement['newer_object']}"))
    return max(newer)[1] if newer else None


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment else "unknown time"


def _span(first: datetime | None, last: datetime | None) -> str:
    if first is None or last is None or first.date() != last.date():
        return f"{_when(first)} – {_when(last)}"
    return f"{_when(first)}–{last:%H:%M}"


def format_hits(text: str, scope: str, hits: Sequence[MemoryHit], excerpt_chars: int = 600) -> str:
    """The memory_search tool output, in the navi shape. Each hit names its row as
    `memory-pipelines lineage` takes it (fact #12 -> `lineage fact 12`, chunk, entry, a
    passage's best turn); a raw excerpt read from the message archive is `message`."""
    lines = [f'memory_search "{text}" (scope={scope}): {len(hits)} hit(s)']
    for number, hit in enumerate(hits, start=1):
        lines.append("")
        if hit.source_type == "fact":
            lines.append(f"{number}. fact #{hit.id} [{hit.category}] · session {hit.session_id} · "
                         f"updated {_when(hit.timestamp)}")
            lines.append(f"   {hit.text}")
        elif hit.source_type == "raw" and hit.turns:
            best = next((t.id for t in hit.turns if t.seq == hit.best_seq), hit.turns[0].id)
            lines.append(f"{number}. passage · turn #{best} · session {hit.session_id} · turns {hit.start_seq}–"
                         f"{hit.end_seq} · {_span(hit.started_at, hit.timestamp)} · {', '.join(hit.roles)}")
            why = [f"matched: {', '.join(hit.terms)}"] if hit.terms else []
            why += [f"similarity {hit.similarity:.2f}"] if hit.similarity is not None else []
            if why:
                lines.append(f"   {' · '.join(why)}")
            if hit.fork is not None:
                lines.append(f"   ⑂ fork of {hit.fork.parent_session_id} after turn {hit.fork.fork_seq}")
            if hit.path:  # forest recall: the nodes descended to it
                lines.append(f"   via {' › '.join(step.split(': ', 1)[0] for step in hit.path)}")
            if hit.superseded_by:
                lines.append(f"   ⚠ outdated: a newer statement overrides this ({hit.superseded_by})")
            lines.extend(f"   {line}" for line in hit.text.splitlines())
        elif hit.source_type == "raw":
            row = f"chunk #{hit.id}" if hit.id is not None else "message"
            lines.append(f"{number}. raw {row} · session {hit.session_id} · turn {hit.start_seq}–{hit.end_seq} · "
                         f"{_when(hit.timestamp)}")
            if hit.superseded_by:
                lines.append(f"   ⚠ outdated: a newer statement overrides this ({hit.superseded_by})")
            if hit.before_summary:
                lines.append("   ℹ verbatim record from before the current summary")
            if hit.breadcrumbs:
                lines.append(f"   keys: {', '.join(hit.breadcrumbs[:8])}")
            body = hit.text if len(hit.text) <= excerpt_chars else hit.text[: excerpt_chars - 1] + "…"
            lines.extend(f"   {line}" for line in body.splitlines())
        elif hit.source_type == "knowledge":
            lines.append(f"{number}. knowledge entry #{hit.id} [{hit.kind}] · {hit.category} · session {hit.session_id} · "
                         f"{_when(hit.timestamp)}")
            if hit.superseded_by:
                lines.append(f"   ⚠ outdated: a newer statement overrides this ({hit.superseded_by})")
            lines.append(f"   {hit.text}")
        else:
            lines.append(f"{number}. sketch #{hit.id} [{hit.section}] · session {hit.session_id} · "
                         f"{_when(hit.timestamp)}")
            lines.append(f"   {hit.text}")
    return "\n".join(lines)


def format_served(text: str, scope: str, served: ServedMemory) -> str:
    """`format_hits` of what a search served, with what it spent of its budget (the hits'
    text, as an agent reads it: the numbered header lines are not counted) and the time the
    question named."""
    budget = served.budget
    unit = "characters" if budget.unit == "chars" else "tokens (estimated)"
    spent = f"{budget.used} of {budget.limit}" if budget.limit is not None else f"{budget.used} (no budget)"
    tail = [f"{unit} used: {spent}" + (f"; {served.left_out} more hit(s) did not fit" if served.left_out else "")]
    if served.time_range is not None:
        tail.append(f"time named: {served.time_range.phrase!r} = {served.time_range.since:%Y-%m-%d} .. "
                    f"{served.time_range.until:%Y-%m-%d} (its passages first)")
    return "\n".join([format_hits(text, scope, served.hits), "", *tail])


@dataclass(frozen=True)
class TurnScores:
    """The turns decay keeps highest for one user (or one of their sessions), as of the
    newest message the pipeline has seen (conversation time, as decay judges)."""
    user_id: str
    session_id: str | None
    as_of: datetime | None
    base_rate: float
    considered: int
    turns: tuple[ScoredTurn, ...]

    def to_json(self) -> dict:
        return {"user_id": self.user_id, "session_id": self.session_id,
                "as_of": self.as_of.isoformat() if self.as_of else None, "formula": DECAY_FORMULA,
                "base_rate": self.base_rate, "considered": self.considered,
                "turns": [{"id": s.turn.id, "session_id": s.turn.session_id, "seq": s.turn.seq, "role": s.turn.role,
                           "ts": s.turn.ts.isoformat(), "text": s.turn.body, "score": round(s.score, 6),
                           "importance": round(s.importance, 6),
                           "cited_by": [{"kind": c.kind, "importance": round(c.weight, 6), "seq_start": c.seq_start,
                                         "seq_end": c.seq_end, "text": c.text[:200]} for c in s.cited_by],
                           "age_hours": round(s.age_hours, 2),
                           "access_count": s.turn.access_count, "rate": s.terms.rate,
                           "faded": round(s.terms.faded, 6), "boost": round(s.terms.boost, 6)}
                          for s in self.turns]}


def get_turns_by_score(conn: psycopg.Connection, user_id: str, session_id: str | None = None, k: int = 10, *,
                       settings: DecaySettings | None = None, as_of: datetime | None = None) -> TurnScores:
    """navra's decay-scored turns: the user's (or the session's) k turns scoring highest
    (importance from the entries and facts that cite a turn, faded with age at a rate
    importance slows, plus the access boost), as of the user's newest message. The turns
    returned count an access."""
    rules = settings or DecaySettings.from_env()
    if as_of is None:
        as_of = user_clocks(conn, [user_id], datetime.now(UTC)).get(user_id)
    scope = {"user_id": user_id, "session_id": session_id}
    with conn.cursor(row_factory=dict_row) as cur:
        turns = [TurnCandidate(**row) for row in cur.execute(query("turn_decay_candidates"), scope).fetchall()]
        citations = [Citation(**row) for row in cur.execute(query("turn_citations"), scope).fetchall()]
    kept = score_turns(turns, citations, as_of, rules.base_rate, k) if as_of is not None else []
    if kept:
        conn.execute(query("count_turn_access"), {"ids": [s.turn.id for s in kept]})
    return TurnScores(user_id, session_id, as_of, rules.base_rate, len(turns), tuple(kept))


def recall(conn: psycopg.Connection, embedder: Embedder | None, session_id: str, recent_messages: Sequence[dict],
           incoming: str, k: int = 2) -> list[MemoryHit]:
    """Automatic recall: up to `k` raw excerpts for the next turn, only once the session has
    a summary. The query is the last four user/assistant messages plus the incoming one;
    hits below 0.55 similarity (or 2 matched terms on the text path), superseded ones and
    those already delivered to this session (the last 100) are dropped."""
    if not conn.execute(query("session_summary_exists"), {"session_id": session_id}).fetchone()[0]:
        return []
    owner = conn.execute(query("session_owner"), {"session_id": session_id}).fetchone()
    if owner is None:
        return []
    turns = [m["content"] for m in recent_messages if m.get("role") in ("user", "assistant")][-4:]
    text = "\n".join([*turns, incoming])
    search = UnifiedMemorySearch(conn, embedder)
    delivered = {r[0] for r in conn.execute(query("recall_delivered"), {"session_id": session_id})}
    candidates = search.mark_freshness(search.search_chunks(text, owner[0], limit=k * 5), owner[0])
    picked = [h for h in candidates
              if h.superseded_by is None and h.id not in delivered
              and ((h.similarity or 0) >= RECALL_MIN_SIMILARITY or (h.matched_terms or 0) >= RECALL_MIN_TERMS)][:k]
    for hit in picked:
        conn.execute(query("record_recall"), {"session_id": session_id, "chunk_id": hit.id})
    conn.execute(query("trim_recall_ledger"), {"session_id": session_id, "keep": RECALL_LEDGER_SIZE})
    return [search.matching_window(hit, text) for hit in picked]


def write_sketch(conn: psycopg.Connection, user_id: str, session_id: str, section: str, key: str, value: str, *,
                 scope: str = "session", at: datetime | None = None, run_id: str = "query") -> None:
    """Write a working note through the query module (as the scratchpad tool does)."""
    if scope not in ("session", "user"):
        raise ValueError("scope must be 'session' or 'user'")
    owner = conn.execute(query("session_owner"), {"session_id": session_id}).fetchone()
    if owner is not None and owner[0] != user_id:
        raise AccessDenied(f"session {session_id} belongs to another user")
    conn.execute(query("upsert_sketch"), {
        "user_id": user_id, "scope": scope, "session_id": session_id, "scope_key": session_id if scope == "session"
        else "", "section": section, "key": key, "value": value, "updated_at": at or datetime.now().astimezone(),
        "source": "api", "source_seq": None, "partition_key": None, "run_id": run_id})

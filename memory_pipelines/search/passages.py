"""Passages of the turn index: found flat (`memory_pipelines.passages`) or by forest recall
down the user's temporal tree."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from memory_pipelines.db import transcripts as transcripts_db
from memory_pipelines.db import tree as tree_db
from memory_pipelines.passages import TurnSearch, search_passages
from memory_pipelines.rules.text import clip
from memory_pipelines.search.base import AccessDenied, SearchBase
from memory_pipelines.search.hits import MemoryHit, passage_hit
from memory_pipelines.search.terms import MAX_QUERY_CHARS, query_terms
from memory_pipelines.core.temporal_tree import FOREST_BEAM, descend

# the turn index's passages forest recall scores the nodes by and serves from
FOREST_CANDIDATES = 40


class PassageSearch(SearchBase):
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
        forks = transcripts_db.fork_points(self.conn, sorted({h.session_id for h in hits}))
        return [replace(h, fork=forks[h.session_id]) if h.session_id in forks else h for h in hits]

    def search_forest(self, text: str, user_id: str, limit: int = 5, how: TurnSearch = TurnSearch(),
                      beam: int = FOREST_BEAM) -> list[MemoryHit]:
        """Forest recall (memory_pipelines.core.temporal_tree.descend): the query matched against the
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
        paths = descend(tree_db.user_tree_nodes(self.conn, user_id), set(query_terms(text)), beam, by_session)
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

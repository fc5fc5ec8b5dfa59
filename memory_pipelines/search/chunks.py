"""Raw chunks: vector and full-text rankings (hybrid, tiered, one alone), and a chunk hit
cut to the window of its turns that matches."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from memory_pipelines.passages import AFTER, BEFORE, Turn
from memory_pipelines.search.base import Plan, SearchBase
from memory_pipelines.search.fusion import fuse_rrf
from memory_pipelines.search.hits import MemoryHit
from memory_pipelines.search.terms import _terms_hit, _tsquery, normalize_query, query_terms

CHUNK_MAX_DISTANCE = 0.45
# Chunk full-text candidates kept per hit wanted: ranked in SQL before any content is read.
TEXT_CANDIDATES_PER_HIT = 2


class ChunkSearch(SearchBase):
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

"""Knowledge entries (hybrid, outdated ones labelled) and the error memory."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np

from memory_pipelines.core.knowledge_entries import Triple, superseded_by
from memory_pipelines.search.base import Plan, SearchBase
from memory_pipelines.search.chunks import CHUNK_MAX_DISTANCE
from memory_pipelines.search.fusion import fuse_rrf
from memory_pipelines.search.hits import MemoryHit
from memory_pipelines.search.terms import _patterns, _terms_hit, _tsquery, query_terms


# a self statement this far from the question, sharing no word with it, is not served first
SELF_MIN_SIMILARITY = 0.05


class KnowledgeSearch(SearchBase):
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
    def _self_entries(text: str, knowledge: Plan, limit: int) -> Plan:
        """What the person said of themselves (entries tagged `self`), best first, without the
        knowledge tier's cutoff (only `SELF_MIN_SIMILARITY`): "would I enjoy a silent
        retreat?" shares no words and little meaning with "the best part of my week is the
        hour before anyone wakes up". Read from the rows of the `knowledge` plan's search (its
        statement, shared: it runs once)."""
        terms = query_terms(text)

        def ranked(results: list[list[dict]]) -> list[MemoryHit]:
            hits = {h.id: h for h in (_entry_hit(r, terms, ()) for r in results[0] if "self" in (r["tags"] or ()))
                    if h.matched_terms or (h.similarity or 0.0) >= SELF_MIN_SIMILARITY}
            by_vector = sorted(hits.values(), key=lambda h: (-(h.similarity or 0.0), h.id))
            by_text = sorted((h for h in hits.values() if h.matched_terms), key=lambda h: (-h.matched_terms, h.id))
            return (fuse_rrf([by_vector, by_text]) if by_text else by_vector)[:limit]

        return Plan(knowledge.statements[:1], ranked)

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
        end_seq=r["seq_end"], tags=tuple(r["tags"] or ()),
        similarity=1 - r["distance"] if r["distance"] is not None else None,
        matched_terms=_terms_hit(f"{r['title']} {r['content']}", terms),
        superseded_by=superseded_by(f"{r['title']} {r['content']}", r["user_id"], r["updated_at"], triples))

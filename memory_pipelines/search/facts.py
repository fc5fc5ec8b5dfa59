"""Facts: vector first, then their words."""

from __future__ import annotations

from collections.abc import Sequence

from memory_pipelines.search.base import Plan, SearchBase
from memory_pipelines.search.hits import MemoryHit
from memory_pipelines.search.terms import _patterns, _terms_hit, query_terms

FACT_MAX_DISTANCE = 0.3


class FactSearch(SearchBase):
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

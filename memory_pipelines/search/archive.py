"""The whole message archive: keyword search, each hit with its neighbouring messages."""

from __future__ import annotations

from dataclasses import replace

from memory_pipelines.search.base import SearchBase
from memory_pipelines.search.hits import MemoryHit
from memory_pipelines.search.terms import _terms_hit, _tsquery, query_terms


class ArchiveSearch(SearchBase):
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

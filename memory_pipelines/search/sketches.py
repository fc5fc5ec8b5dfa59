"""Sketches (working notes): searched by their words, written through the query module."""

from __future__ import annotations

from datetime import datetime

import psycopg

from memory_pipelines.db import search as search_db
from memory_pipelines.search.base import AccessDenied, Plan, SearchBase
from memory_pipelines.search.hits import MemoryHit
from memory_pipelines.search.terms import _patterns, _terms_hit, query_terms


class SketchSearch(SearchBase):
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


def write_sketch(conn: psycopg.Connection, user_id: str, session_id: str, section: str, key: str, value: str, *,
                 scope: str = "session", at: datetime | None = None, run_id: str = "query") -> None:
    """Write a working note through the query module (as the scratchpad tool does)."""
    if scope not in ("session", "user"):
        raise ValueError("scope must be 'session' or 'user'")
    owner = search_db.session_owner(conn, session_id)
    if owner is not None and owner != user_id:
        raise AccessDenied(f"session {session_id} belongs to another user")
    search_db.upsert_sketch(conn, {
        "user_id": user_id, "scope": scope, "session_id": session_id, "scope_key": session_id if scope == "session"
        else "", "section": section, "key": key, "value": value, "updated_at": at or datetime.now().astimezone(),
        "source": "api", "source_seq": None, "partition_key": None, "run_id": run_id})

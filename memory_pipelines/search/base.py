"""What every store's search shares: the user scope, the query's vector, statements sent
in one round trip and made into hits."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import psycopg

from memory_pipelines.db import search as search_db
from memory_pipelines.db.vectors import register_vector_types
from memory_pipelines.embed import Embedder, EmbeddingError
from memory_pipelines.search.hits import MemoryHit
from memory_pipelines.search.terms import MAX_QUERY_CHARS

log = logging.getLogger("memory_pipelines.search")


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
class Plan:
    """A store's search as statements (name, params) and what makes hits of their rows."""
    statements: tuple[tuple[str, dict], ...]
    hits: Callable[[list[list[dict]]], list[MemoryHit]]


class SearchBase:
    """The connection, embedder and scope each store's search (a mixin per module) reads with."""

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
            other = search_db.other_embedding_models(self.conn, self._scope(user_id), self.embedder.model_id)
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
        return search_db.search_rows(self.conn, name, params)

    def _fetch(self, statements: Sequence[tuple[str, dict]]) -> list[list[dict]]:
        """Statements sent together in one pipeline: one round trip instead of one each,
        which on a busy server costs more than these small queries themselves."""
        return search_db.pipelined_rows(self.conn, statements)

    def _resolve(self, *plans: Plan) -> list[list[MemoryHit]]:
        """The plans' statements in one round trip, then each plan's rows made into hits; a
        statement two plans share (the same object) runs once."""
        unique = list({id(statement): statement for plan in plans for statement in plan.statements}.values())
        rows = dict(zip(map(id, unique), self._fetch(unique)))
        return [plan.hits([rows[id(statement)] for statement in plan.statements]) for plan in plans]

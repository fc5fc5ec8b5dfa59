"""Entity graph queries: relations around an entity (1 hop), entities within 2 hops,
filters by entity and relation, validity at a moment. Queries at a moment ("active")
rank by confidence; general ones list by creation time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from memory_pipelines.db import entries as entries_db


@dataclass(frozen=True)
class Triple:
    id: int
    subject: str
    relation: str
    object: str
    confidence: float
    valid_from: datetime
    valid_until: datetime | None
    session_id: str
    seq_start: int
    seq_end: int


def relations(conn: psycopg.Connection, user_id: str, entity: str | None = None, relation: str | None = None,
              at: datetime | None = None) -> list[Triple]:
    return [Triple(**row) for row in entries_db.graph_relations(conn, user_id, entity, relation, at)]


def reachable(conn: psycopg.Connection, user_id: str, entity: str, hops: int = 2,
              at: datetime | None = None) -> dict[str, int]:
    """Entities reachable from `entity` within `hops` relations (either direction), with
    their distance."""
    distance = {entity.casefold(): 0}
    names = {entity.casefold(): entity}
    frontier = [entity]
    for hop in range(1, hops + 1):
        following = []
        for node in frontier:
            for t in relations(conn, user_id, node, at=at):
                for other in (t.subject, t.object):
                    if other.casefold() not in distance:
                        distance[other.casefold()] = hop
                        names[other.casefold()] = other
                        following.append(other)
        frontier = following
    return {names[k]: d for k, d in distance.items() if d > 0}

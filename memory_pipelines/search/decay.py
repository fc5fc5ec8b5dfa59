"""navra's decay-scored turns: the turns decay keeps highest for a user or a session."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from memory_pipelines.config import DecaySettings
from memory_pipelines.db import turns as turns_db
from memory_pipelines.core.knowledge_entries import DECAY_FORMULA
from memory_pipelines.lifecycle import user_clocks
from memory_pipelines.core.turn_index import ScoredTurn, score_turns


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
                       rules: DecaySettings = DecaySettings(), as_of: datetime | None = None) -> TurnScores:
    """navra's decay-scored turns: the user's (or the session's) k turns scoring highest
    (importance from the entries and facts that cite a turn, faded with age at a rate
    importance slows, plus the access boost), as of the user's newest message. The turns
    returned count an access."""
    if as_of is None:
        as_of = user_clocks(conn, [user_id], datetime.now(UTC)).get(user_id)
    turns, citations = turns_db.turn_decay_candidates(conn, user_id, session_id)
    kept = score_turns(turns, citations, as_of, rules.base_rate, k) if as_of is not None else []
    if kept:
        turns_db.count_turn_access(conn, [s.turn.id for s in kept])
    return TurnScores(user_id, session_id, as_of, rules.base_rate, len(turns), tuple(kept))

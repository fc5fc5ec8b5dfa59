"""The turn-level index (`memory_turns`): every user, assistant and tool message of the
archive as a searchable unit, in its session's language, with the breadcrumbs and summary
keys found in it as extra keys.

Rows always describe a session as it is now (all its messages, its current summary and
chunks), so indexing a session again, on any day and in any order, leaves the same rows.
A turn's embedding is of the turn read with its neighbours; when a neighbour changes (the
next message arrives), `window_hash` changes and the embedding is made again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from memory_pipelines.core.knowledge_entries import DecayTerms, decay_terms
from memory_pipelines.core.knowledge_entries import importance as knowledge_importance
from memory_pipelines.digests import json_digest
from memory_pipelines.records import Message, TurnRow
from memory_pipelines.rules.text import content_words, detect_language, text_search_config

TOOL_RESULT_CHARS = 2000
# what the embedding of a turn reads: the turn, and the ends of its neighbours that touch it
OWN_CHARS, NEIGHBOUR_CHARS = 1600, 600
MAX_KEYS = 20
INDEXED_ROLES = ("user", "assistant", "tool")
# the importance of a turn no distilled row cites: below every cited one (the least, an event
# at confidence 0.5, is 0.15), so it fades fastest and never outranks cited memory of its age
UNCITED_TURN_IMPORTANCE = 0.1


def render_body(m: Message) -> str:
    """What a turn says, as search reads and passages show it (the role is shown apart)."""
    if m.role == "tool":
        output = m.content if len(m.content) <= TOOL_RESULT_CHARS else m.content[:TOOL_RESULT_CHARS] + "…"
        failed = " (failed)" if m.metadata.get("is_error") else ""
        return f"[tool result] {m.tool_name or 'tool'}{failed}: {output}"
    if m.role == "assistant" and m.tool_name:
        call = f"[tool call] {m.tool_name}({json.dumps(m.tool_args or {}, ensure_ascii=False, sort_keys=True)})"
        return f"{m.content}\n{call}" if m.content.strip() else call
    return m.content


def _hash(*parts) -> str:
    return json_digest(parts, ensure_ascii=False, default=str)


def window_text(previous: str | None, own: str, following: str | None) -> str:
    """The text a turn's embedding is made of: the turn in the middle of its neighbours' ends."""
    parts = [previous[-NEIGHBOUR_CHARS:] if previous else None, own[:OWN_CHARS],
             following[:NEIGHBOUR_CHARS] if following else None]
    return "\n".join(p for p in parts if p)


def keys_in(body: str, keys: Iterable[str]) -> tuple[str, ...]:
    """The keys (breadcrumbs, summary keys) a turn itself says, in their order, at most 20."""
    return _keys_said(body, _folded_keys(keys))


def _folded_keys(keys: Iterable[str]) -> list[tuple[str, str]]:
    """Distinct keys long enough to look for, each with its case-folded form."""
    return [(k, k.casefold()) for k in dict.fromkeys(keys) if len(k) >= 3]


def _keys_said(body: str, folded_keys: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    folded = body.casefold()
    return tuple([k for k, folded_key in folded_keys if folded_key in folded][:MAX_KEYS])


def build_turns(messages: Sequence[Message], keys: Sequence[str]) -> list[TurnRow]:
    """A session's turns, in seq order: its user, assistant and tool messages, in the
    language its conversation is written in."""
    units = [m for m in sorted(messages, key=lambda m: m.seq) if m.role in INDEXED_ROLES]
    if not units:
        return []
    language = text_search_config(detect_language([m.content for m in units if m.role in ("user", "assistant")]))
    bodies = [render_body(m) for m in units]
    folded_keys = _folded_keys(keys)  # once a session, not once a turn
    rows = []
    for pos, (m, body) in enumerate(zip(units, bodies, strict=True)):
        previous = bodies[pos - 1] if pos > 0 else None
        following = bodies[pos + 1] if pos + 1 < len(bodies) else None
        rows.append(TurnRow(m.session_id, m.seq, m.user_id, pos, m.role, m.ts, language, body,
                            _keys_said(body, folded_keys), _hash(window_text(previous, body, following))))
    return rows



@dataclass(frozen=True)
class TurnCandidate:
    """A stored turn, as decay-scored retrieval reads it."""
    id: int
    session_id: str
    seq: int
    role: str
    ts: datetime
    body: str
    access_count: int
    last_accessed_at: datetime | None


@dataclass(frozen=True)
class Citation:
    """A distilled row citing a seq span of a session: a knowledge entry (its importance)
    or a fact (its confidence, 0-1)."""
    session_id: str
    seq_start: int
    seq_end: int
    kind: str  # an entry's kind, or "fact"
    importance: float | None
    confidence: float | None
    text: str

    @property
    def weight(self) -> float:
        """navra's importance: an entry's own, a fact's 0.5 x its confidence."""
        return self.importance if self.importance is not None else knowledge_importance("fact", self.confidence or 0)


def cite_turns(turns: Sequence[TurnCandidate], citations: Iterable[Citation]) -> dict[int, list[Citation]]:
    """Which turns each citation gives its importance to: the turns of its span whose text
    shares its content words (all of them, or two at least), so a wide span lifts the turns
    that say what was distilled and not every "thanks" in it; when none does (a paraphrase),
    every turn of the span."""
    by_session: dict[str, list[TurnCandidate]] = {}
    for t in turns:
        by_session.setdefault(t.session_id, []).append(t)
    words = {t.id: content_words(t.body) for t in turns}
    cited: dict[int, list[Citation]] = {}
    for c in citations:
        span = [t for t in by_session.get(c.session_id, ()) if c.seq_start <= t.seq <= c.seq_end]
        wanted = content_words(c.text)
        need = min(2, len(wanted))
        saying = [t for t in span if need and len(words[t.id] & wanted) >= need]
        for t in saying or span:
            cited.setdefault(t.id, []).append(c)
    return cited


def turn_importance(cited_by: Iterable[Citation]) -> float:
    """The highest importance of what cites a turn, or `UNCITED_TURN_IMPORTANCE`."""
    return max((c.weight for c in cited_by), default=UNCITED_TURN_IMPORTANCE)


@dataclass(frozen=True)
class ScoredTurn:
    turn: TurnCandidate
    cited_by: tuple[Citation, ...]
    age_hours: float
    terms: DecayTerms

    @property
    def importance(self) -> float:
        return turn_importance(self.cited_by)

    @property
    def score(self) -> float:
        return self.terms.score


def score_turns(turns: Sequence[TurnCandidate], citations: Iterable[Citation], as_of: datetime, base_rate: float,
                k: int) -> list[ScoredTurn]:
    """The k turns decay keeps highest as of `as_of` (navra's get_turns_by_score): the
    importance-modulated fade plus the access boost; ties go to the newer turn."""
    cited = cite_turns(turns, citations)
    scored = []
    for t in turns:
        by = tuple(cited.get(t.id, ()))
        importance = turn_importance(by)
        age_hours = max(0.0, (as_of - t.ts).total_seconds() / 3600)
        scored.append(ScoredTurn(t, by, age_hours, decay_terms(importance, age_hours, t.access_count, base_rate)))
    scored.sort(key=lambda s: (-s.score, -s.turn.ts.timestamp(), s.turn.session_id, s.turn.seq))
    return scored[:max(0, k)]

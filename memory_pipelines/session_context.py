"""The query module: what the pipeline materialized, served to an agent.

`context_for` builds a session's turn context the Agenvoy way: the last N messages
verbatim, and the rolling summary as a "Prior summary" block placed just before the
user's input. With a decision model, only the summary entries relevant to the request are
kept (general rules about language, format or workflow always count); without one, or
when it fails, all are kept; when none is relevant, the block is left out.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

import psycopg

from memory_pipelines.config import SPECS
from memory_pipelines.db import facts_chunks as facts_chunks_db
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.db import transcripts as transcripts_db
from memory_pipelines.db.facts_chunks import StoredFact
from memory_pipelines.core.fact_extraction import render_fact
from memory_pipelines.llm.backends import ModelBackend, ModelCall, ModelError
from memory_pipelines.records import ForkPoint, Message, Summary

QUERY_RUN_ID = "query"


@dataclass(frozen=True)
class ForkNote:
    """A fork of the session, for its context: where it branched and what it is about."""

    fork: ForkPoint
    current: str  # its summary's current discussion (empty: not summarized yet)


@dataclass(frozen=True)
class SessionContext:
    session_id: str
    messages: tuple[Message, ...]
    summary: Summary | None  # after relevance filtering; None: no summary, or nothing relevant
    relevance: str  # all | filtered | none_relevant | decision_failed | no_summary
    call: ModelCall | None = None
    forks: tuple[ForkNote, ...] = ()  # with include_forks: the session's forks

    @property
    def summary_block(self) -> str | None:
        if self.summary is None:
            return None
        body = json.dumps(self.summary.to_json(), ensure_ascii=False, indent=2)
        return f"Prior summary (follow key_decisions; the rest is background):\n```json\n{body}\n```"

    @property
    def forks_block(self) -> str | None:
        """The session's forks, labelled as other branches (not this conversation)."""
        if not self.forks:
            return None
        lines = [f"- {n.fork.session_id} (fork after turn {n.fork.fork_seq}): {n.current or 'not summarized yet'}"
                 for n in self.forks]
        return "Forks of this session (other branches, not this conversation):\n" + "\n".join(lines)

    def to_json(self, incoming: str) -> dict:
        """The context as `context --json` prints it and the API answers."""
        return {"session_id": self.session_id, "relevance": self.relevance,
                "summary": self.summary.to_json() if self.summary else None,
                "forks": [{**asdict(n.fork), "current": n.current} for n in self.forks],
                "messages": self.chat_messages(incoming)}

    def chat_messages(self, incoming: str) -> list[dict[str, str]]:
        """The turn as chat messages: history, then the user's input with the blocks before it."""
        history = [{"role": m.role, "content": m.content} for m in self.messages if m.role != "system"]
        blocks = "\n\n".join(b for b in (self.summary_block, self.forks_block) if b)
        return [*history, {"role": "user", "content": f"{blocks}\n\n{incoming}" if blocks else incoming}]


def context_for(conn: psycopg.Connection, session_id: str, request: str | None = None, *,
                limit: int = SPECS["MEMORY_CONTEXT_MESSAGES"].default, decision: ModelBackend | None = None,
                include_forks: bool = False) -> SessionContext:
    """A session's last `limit` messages (the context window, MEMORY_CONTEXT_MESSAGES: the
    same messages the chunker leaves out of chunks) along its timeline (a fork's: the
    turns it shares with its parent, then its own) and its prior summary; with
    `include_forks`, its forks too, each with what it is about, labelled as other branches."""
    if limit < 0:
        raise ValueError("limit must be >= 0")
    messages = tuple(summaries_db.last_messages(conn, session_id, limit)) if limit else ()
    forks = tuple(ForkNote(fork, current) for fork, current in transcripts_db.forks_of(conn, session_id)) \
        if include_forks else ()
    summary = summaries_db.current_summary(conn, session_id)
    if summary is None or summary.is_empty:
        return SessionContext(session_id, messages, None, "no_summary", forks=forks)
    if decision is None or not request:
        return SessionContext(session_id, messages, summary, "all", forks=forks)
    try:
        relevant, call = decision.select_relevant(summary, request)
        kept, relevance = relevant, "filtered" if relevant is not None else "none_relevant"
    except ModelError as exc:
        call, kept, relevance = exc.call, summary, "decision_failed"
    summaries_db.insert_llm_calls(conn, [(call, None, session_id)], run_id=QUERY_RUN_ID, asset="query.context_for")
    return SessionContext(session_id, messages, kept, relevance, call, forks)


def user_facts(conn: psycopg.Connection, user_id: str, *, include_merged: bool = False) -> list[StoredFact]:
    """A user's facts. Rows merged into another (re-spelled keys) are hidden unless asked for."""
    return facts_chunks_db.facts_for_user(conn, user_id, include_merged)


def facts_prompt(conn: psycopg.Connection, user_id: str, now: datetime | None = None) -> str:
    """The user's visible facts as prompt lines, each with its confidence and age, so a
    stale fact reads as stale: `• [preferences] editor → neovim (confidence: 90%, updated 34d ago)`."""
    now = now or datetime.now(UTC)
    return "\n".join(render_fact(f.category, f.key, f.value, f.confidence, f.last_verified_at, now)
                     for f in user_facts(conn, user_id))

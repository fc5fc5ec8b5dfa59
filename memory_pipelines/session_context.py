"""The query module: what the pipeline materialized, served to an agent.

`context_for` builds a session's turn context the Agenvoy way: the last N messages
verbatim, and the rolling summary as a "Prior summary" block placed just before the
user's input. With a decision model, only the summary entries relevant to the request are
kept (general rules about language, format or workflow always count); without one, or
when it fails, all are kept; when none is relevant, the block is left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from memory_pipelines.config import context_window
from memory_pipelines.db import repository
from memory_pipelines.db.repository import StoredFact
from memory_pipelines.facts import render_fact
from memory_pipelines.llm.backends import ModelBackend, ModelCall, ModelError
from memory_pipelines.records import Message, Summary

QUERY_RUN_ID = "query"


@dataclass(frozen=True)
class SessionContext:
    session_id: str
    messages: tuple[Message, ...]
    summary: Summary | None  # after relevance filtering; None: no summary, or nothing relevant
    relevance: str  # all | filtered | none_relevant | decision_failed | no_summary
    call: ModelCall | None = None

    @property
    def summary_block(self) -> str | None:
        if self.summary is None:
            return None
        body = json.dumps(self.summary.to_json(), ensure_ascii=False, indent=2)
        return f"Prior summary (follow key_decisions; the rest is background):\n```json\n{body}\n```"

    def chat_messages(self, incoming: str) -> list[dict[str, str]]:
        """The turn as chat messages: history, then the user's input with the block before it."""
        history = [{"role": m.role, "content": m.content} for m in self.messages if m.role != "system"]
        block = self.summary_block
        return [*history, {"role": "user", "content": f"{block}\n\n{incoming}" if block else incoming}]


def context_for(conn: psycopg.Connection, session_id: str, request: str | None = None, *,
                limit: int | None = None, decision: ModelBackend | None = None) -> SessionContext:
    """A session's last `limit` messages (default: the context window, MEMORY_CONTEXT_MESSAGES,
    the same messages the chunker leaves out of chunks) and its prior summary."""
    limit = context_window() if limit is None else limit
    if limit < 0:
        raise ValueError("limit must be >= 0")
    messages = tuple(repository.last_messages(conn, session_id, limit)) if limit else ()
    summary = repository.current_summary(conn, session_id)
    if summary is None or summary.is_empty:
        return SessionContext(session_id, messages, None, "no_summary")
    if decision is None or not request:
        return SessionContext(session_id, messages, summary, "all")
    try:
        relevant, call = decision.select_relevant(summary, request)
        kept, relevance = relevant, "filtered" if relevant is not None else "none_relevant"
    except ModelError as exc:
        call, kept, relevance = exc.call, summary, "decision_failed"
    repository.insert_llm_calls(conn, [call], run_id=QUERY_RUN_ID, asset="query.context_for",
                                partition_key=None, session_id=session_id)
    return SessionContext(session_id, messages, kept, relevance, call)


def user_facts(conn: psycopg.Connection, user_id: str, *, include_merged: bool = False) -> list[StoredFact]:
    """A user's facts. Rows merged into another (re-spelled keys) are hidden unless asked for."""
    return repository.facts_for_user(conn, user_id, include_merged)


def facts_prompt(conn: psycopg.Connection, user_id: str, now: datetime | None = None) -> str:
    """The user's visible facts as prompt lines, each with its confidence and age, so a
    stale fact reads as stale: `• [preferences] editor → neovim (confidence: 90%, updated 34d ago)`."""
    now = now or datetime.now(UTC)
    return "\n".join(render_fact(f.category, f.key, f.value, f.confidence, f.last_verified_at, now)
                     for f in user_facts(conn, user_id))

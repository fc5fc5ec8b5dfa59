"""The operations the HTTP API and the MCP server both offer, over the query module.

Every operation acts as one key's user (`Caller`): a user id in a request that is not the
key's is refused (403) unless the key is an admin's. Writes record lineage (model and
prompt version `api`, a run id naming the key and the request time) and, given an
idempotency key, run at most once: the answer is stored in the write's own transaction, so
a retry, even a concurrent one, gets the first answer back.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines import graph, lineage
from memory_pipelines.api.access import API, ApiError, Unauthorized, Forbidden, NotFound, Conflict, Caller
from memory_pipelines.api.keys import authenticate
from memory_pipelines.config import DecaySettings, Settings
from memory_pipelines.db import api as api_db
from memory_pipelines.db import facts_chunks as facts_chunks_db
from memory_pipelines.db import entries as entries_db
from memory_pipelines.db import search as search_db
from memory_pipelines.db.outage import DatabaseLost, ServerLog, connection_lost
from memory_pipelines.digests import json_digest
from memory_pipelines.embed import Embedder
from memory_pipelines.forks import ForkError, fork_session, merge_fork, restore_merge
from memory_pipelines.core.fact_extraction import (
    CONFIDENCE, DEFAULT_CONFIDENCE, SOURCES, FactCandidate, canonical_key, normalize_key,
)
from memory_pipelines.core.knowledge_entries import DECAY_FORMULA, decay_terms, prepare
from memory_pipelines.lifecycle import judge_decay, user_clocks
from memory_pipelines.llm import ModelBackend, build_backend
from memory_pipelines.llm.rendering import render_transcript
from memory_pipelines.llm.config import ModelConfig, chat_config, decision_config
from memory_pipelines.records import DEFAULT_BUDGET_CHARS, SEARCH_SCOPES, Message
from memory_pipelines.session_context import context_for
from memory_pipelines.search import (
    SEARCH_MODES, AccessDenied, UnifiedMemorySearch, format_served, get_turns_by_score, recall, write_sketch,
)
from memory_pipelines.core.transcript_scan import hash_message

log = logging.getLogger("memory_pipelines.api")

MAX_K = 20
MAX_QUESTION_CHARS = 10_000  # a question, not a document: longer ones are refused, not cut
STATEMENT_TIMEOUT_MS = 10_000
# what a client is told to wait after the database went away: a crashed server recovers in about a second
RETRY_AFTER_SECONDS = 5


def _k(k: int | None, default: int = 5) -> int:
    return max(1, min(MAX_K, int(k if k is not None else default)))


def _question(text: str | None) -> str:
    text = (text or "").strip()
    if not text:
        raise ApiError("the query is empty: send the question to search for (q)")
    if len(text) > MAX_QUESTION_CHARS:
        raise ApiError(f"the query is {len(text)} characters; at most {MAX_QUESTION_CHARS} are searched: "
                       "send the question, not a document")
    return text


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str, ensure_ascii=False))


class MemoryService:
    """The operations, each on a connection of `pool` in one transaction with a statement
    timeout. `embedder` serves every search (built once per process: a local model loads
    once); model back ends are built per request from the settings."""

    def __init__(self, pool: ConnectionPool, embedder: Embedder, settings: Settings, *,
                 statement_timeout_ms: int = STATEMENT_TIMEOUT_MS, server_log: ServerLog | None = None):
        self.pool, self.embedder, self.settings = pool, embedder, settings
        self.statement_timeout_ms = statement_timeout_ms
        self.server_log = server_log or ServerLog(None)

    @classmethod
    def open(cls, settings: Settings) -> "MemoryService":
        """The service of this process, from its settings: the database's pool (sized by
        MEMORY_API_POOL_SIZE) and the configured embedder."""
        from memory_pipelines.config import ApiSettings
        from memory_pipelines.db.connection import get_pool, resolve_url
        from memory_pipelines.embed import build_embedder, embed_config

        api = ApiSettings.from_settings(settings)
        pool = get_pool(resolve_url(settings.database_url, settings.home), max_size=api.pool_size)
        return cls(pool, build_embedder(embed_config(settings)), settings, statement_timeout_ms=int(api.timeout * 1000),
                   server_log=ServerLog.of_home(settings.home, settings.database_url))

    def _chat(self) -> ModelConfig:
        return chat_config(self.settings)

    def _decision(self) -> ModelConfig:
        return decision_config(self.settings)

    def close(self) -> None:
        self.embedder.close()

    def database_lost(self, exc: BaseException, doing: str) -> str | None:
        """The one line for a request whose database connection ended under it (None: `exc`
        is another error): what the server's log says, and when to try again."""
        if not connection_lost(exc):
            return None
        return str(DatabaseLost(doing, self.server_log, then=f"try again in {RETRY_AFTER_SECONDS} s"))

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection]:
        with self.pool.connection() as conn, conn.transaction():
            api_db.set_statement_timeout(conn, str(self.statement_timeout_ms))
            yield conn

    # --- who is asking -------------------------------------------------------------------

    def caller(self, secret: str | None) -> Caller:
        if not secret:
            raise Unauthorized("an API key is required: Authorization: Bearer <key> (MEMORY_API_KEY over stdio)")
        with self._conn() as conn:
            key = authenticate(conn, secret)
        if key is None:
            raise Unauthorized("the API key is unknown or revoked")
        return Caller(key)

    def health(self) -> dict:
        with self._conn() as conn:
            conn.execute("SELECT 1")
        return {"status": "ok", "database": "ok", "embedder": self.embedder.model_id}

    # --- reads ---------------------------------------------------------------------------

    def search(self, caller: Caller, text: str, *, user_id: str | None = None, scope: str = "all", k: int = 5,
               budget: int | None = DEFAULT_BUDGET_CHARS, budget_tokens: int | None = None,
               session_id: str | None = None, now: datetime | None = None, mode: str = "flat",
               include_forks: bool = False) -> dict:
        """Unified search within a budget: the hits with provenance, freshness and scores,
        and the text an agent reads (the CLI's). `mode="forest"` finds passages by forest
        recall (one user's trees); `include_forks` serves forked sessions' passages too."""
        if scope not in SEARCH_SCOPES:
            raise ApiError(f"scope must be one of {', '.join(SEARCH_SCOPES)}, not {scope!r}")
        if mode not in SEARCH_MODES:
            raise ApiError(f"mode must be one of {', '.join(SEARCH_MODES)}, not {mode!r}")
        text = _question(text)
        user = caller.user(user_id)
        if user is None and mode == "forest":
            raise ApiError("forest recall descends one user's trees: name the user (user_id)")
        if user is None:
            log.info("admin key %d searched every user", caller.key.id)
        with self._conn() as conn:
            if session_id is not None:
                self._own_session(conn, caller, session_id)
            search = UnifiedMemorySearch(conn, self.embedder, admin=user is None)
            served = search.serve(text, scope, _k(k), user, session_id, session_id,
                                  budget_chars=budget or None, budget_tokens=budget_tokens, now=now, mode=mode,
                                  include_forks=include_forks)
        return {**served.to_json(text, scope), "text": format_served(text, scope, served),
                "warnings": [w.message for w in search.warnings]}

    def facts_search(self, caller: Caller, text: str, *, user_id: str | None = None, k: int = 15) -> dict:
        user, text = caller.one_user(user_id), _question(text)
        with self._conn() as conn:
            hits = UnifiedMemorySearch(conn, self.embedder).search_facts(text, user, limit=_k(k, 15))
        return {"facts": _jsonable([h.to_json() for h in hits])}

    def facts_categories(self, caller: Caller, *, user_id: str | None = None) -> dict:
        user = caller.one_user(user_id)
        with self._conn() as conn:
            facts = facts_chunks_db.facts_for_user(conn, user)
        categories: dict[str, int] = {}
        for f in facts:
            categories[f.category] = categories.get(f.category, 0) + 1
        return {"user_id": user, "categories": [{"category": c, "facts": n} for c, n in sorted(categories.items())]}

    def context(self, caller: Caller, session_id: str, *, request: str | None = None, limit: int | None = None,
                all_entries: bool = False, include_forks: bool = False) -> dict:
        """A session's turn context: its last messages and the prior-summary block, the
        entries relevant to the request kept (the configured decision model)."""
        decision = None if all_entries else build_backend(self._decision())
        try:
            with self._conn() as conn:
                self._own_session(conn, caller, session_id)
                bounded = self.settings.context_messages if limit is None else max(0, min(200, limit))
                ctx = context_for(conn, session_id, request, limit=bounded, decision=decision,
                                  include_forks=include_forks)
        finally:
            if decision is not None:
                decision.close()
        return ctx.to_json(request or "")

    def recall(self, caller: Caller, session_id: str, incoming: str, *, recent: list[dict] | None = None,
               k: int = 2) -> dict:
        """Automatic recall for the next turn; what it returns is recorded in the session's
        ledger and not returned again."""
        with self._conn() as conn:
            self._own_session(conn, caller, session_id)
            hits = recall(conn, self.embedder, session_id, recent or [], incoming, k=max(1, min(5, k)))
        return {"session_id": session_id, "hits": _jsonable([h.to_json() for h in hits])}

    def knowledge_search(self, caller: Caller, text: str, *, user_id: str | None = None, k: int = 5,
                         session_id: str | None = None, process: str | None = None,
                         consent: str | None = None) -> dict:
        """Knowledge entries, hybrid (vector and full text fused by reciprocal rank), each
        with whether a newer statement overrides it."""
        user, text = caller.user(user_id), _question(text)
        with self._conn() as conn:
            hits = UnifiedMemorySearch(conn, self.embedder, admin=user is None).search_knowledge(
                text, user, session_id, process, _k(k), consent)
        return {"entries": _jsonable([h.to_json() for h in hits])}

    def graph(self, caller: Caller, entity: str, *, user_id: str | None = None, relation: str | None = None,
              at: datetime | None = None, hops: int = 1) -> dict:
        """The entity graph around an entity: its triples (one hop, optionally one relation,
        valid at a moment), and with hops 2 the entities within two relations."""
        user = caller.one_user(user_id)
        if hops not in (1, 2):
            raise ApiError("hops must be 1 or 2")
        with self._conn() as conn:
            triples = graph.relations(conn, user, entity, relation, at)
            within = graph.reachable(conn, user, entity, hops=2, at=at) if hops == 2 else None
        return {"entity": entity, "triples": _jsonable([asdict(t) for t in triples]), "reachable": within}

    def decay_scores(self, caller: Caller, *, user_id: str | None = None, limit: int = 100) -> dict:
        """What decay would do to the user's knowledge entries and facts as of the user's
        newest message (conversation time, as the pipeline judges): each score with the
        formula's parts, and the verdict's reason (too_young, above_threshold, decayed …)."""
        user = caller.one_user(user_id)
        rules = DecaySettings.from_settings(self.settings)
        with self._conn() as conn:
            now = datetime.now(UTC)
            as_of = user_clocks(conn, [user], now).get(user, now)
            verdicts = judge_decay(conn, as_of, rules, user)
        rows = []
        for v in verdicts[:max(1, min(1000, limit))]:
            c = v.candidate
            age_hours = (as_of - c.seen_at).total_seconds() / 3600
            terms = decay_terms(c.importance, age_hours, c.access_count, rules.base_rate)
            rows.append({"table": c.source_table, "id": c.id, "key": c.key, "text": c.text[:200],
                         "importance": round(c.importance, 6), "age_hours": round(age_hours, 2),
                         "access_count": c.access_count, "last_accessed_at": c.last_accessed_at,
                         "rate": terms.rate, "faded": round(terms.faded, 6), "boost": round(terms.boost, 6),
                         "score": round(terms.score, 6), "verdict": v.reason, "would_archive": v.archived})
        return _jsonable({"user_id": user, "as_of": as_of, "formula": DECAY_FORMULA, "base_rate": rules.base_rate,
                          "threshold": rules.threshold, "min_age_days": rules.min_age_days,
                          "decay_facts": rules.decay_facts, "count": len(verdicts), "entries": rows})

    def turns_by_score(self, caller: Caller, *, user_id: str | None = None, session_id: str | None = None,
                       k: int = 10) -> dict:
        """The user's (or one session's) turns decay keeps highest, each with its score's
        parts (importance from what cites it, age, accesses); the turns returned count an
        access. An admin names the user, or a session (its user's turns)."""
        with self._conn() as conn:
            if session_id is None:
                user = caller.one_user(user_id)
            else:
                owner = self._own_session(conn, caller, session_id)
                user = caller.user(user_id) or owner
                if user != owner:
                    raise NotFound(f"no session {session_id!r} of user {user!r}")
            scores = get_turns_by_score(conn, user, session_id, max(1, min(100, k)),
                                       rules=DecaySettings.from_settings(self.settings))
        return scores.to_json()

    def lineage(self, caller: Caller, kind: str, ident: str) -> dict:
        with self._conn() as conn:
            try:
                report = lineage.lineage(conn, kind, ident)
            except ValueError as exc:
                raise ApiError(str(exc)) from None
            except LookupError as exc:
                raise NotFound(str(exc)) from None
        owner = report["row"].get("user_id")
        if not caller.key.admin and owner != caller.key.user_id:
            raise NotFound(f"no {kind} {ident} of this key's user")
        return _jsonable(report)

    def memory_summary(self, caller: Caller, *, user_id: str | None = None) -> dict:
        user = caller.one_user(user_id)
        with self._conn() as conn:
            row = api_db.user_memory_summary(conn, user)
        return {"user_id": user, "summary": row[0] if row else None, "facts": row[1] if row else 0,
                "updated_at": row[2].isoformat() if row else None}

    # --- writes --------------------------------------------------------------------------

    def save_fact(self, caller: Caller, category: str, key: str, value: str, *, user_id: str | None = None,
                  source: str = "user_explicit", confidence: int | None = None, expires_days: int | None = None,
                  source_context: str | None = None, session_id: str | None = None,
                  idempotency_key: str | None = None) -> dict:
        """Upsert a fact by (user, category, key) under the event-time rule, its spellings
        merged as the extractor merges them."""
        user = caller.one_user(user_id)
        category, key, value = normalize_key(category or ""), normalize_key(key or ""), str(value).strip()
        if not category or not key or not value:
            raise ApiError("category, key and value must each hold a word")
        if source not in SOURCES:
            raise ApiError(f"source must be one of {', '.join(SOURCES)}")
        if confidence is not None and not 0 <= confidence <= 100:
            raise ApiError("confidence is a percentage: 0 to 100")
        if expires_days is not None and expires_days < 1:
            raise ApiError("expires_days must be at least 1")
        request = {"user": user, "category": category, "key": key, "value": value, "source": source,
                   "confidence": confidence, "expires_days": expires_days, "source_context": source_context,
                   "session_id": session_id}

        def write(conn: psycopg.Connection, now: datetime) -> dict:
            if session_id is not None:
                self._own_session(conn, caller, session_id)
            facts_chunks_db.lock_users(conn, [user])  # the pipeline merges a user's fact families under it
            candidate = FactCandidate(category, key, canonical_key(key), value, source,
                                      confidence if confidence is not None else CONFIDENCE.get(source, DEFAULT_CONFIDENCE),
                                      source_context, now, 0, 0,
                                      now + timedelta(days=expires_days) if expires_days else None)
            facts_chunks_db.upsert_facts(conn, [(user, candidate, {
                **caller.lineage(now), "session_id": session_id or f"api:key-{caller.key.id}"})])
            [stored] = [f for f in facts_chunks_db.facts_for_user(conn, user, include_merged=True)
                        if (f.category, f.key) == (category, key)]
            return {"saved": True, "fact": _jsonable(asdict(stored))}

        return self._write(caller, "save_fact", request, idempotency_key, write)

    def forget_fact(self, caller: Caller, key: str, *, user_id: str | None = None, category: str | None = None,
                    idempotency_key: str | None = None) -> dict:
        """Delete a visible fact (and the hidden rows merged into it)."""
        user = caller.one_user(user_id)
        key = normalize_key(key or "")
        category = normalize_key(category) if category else None
        if not key:
            raise ApiError("name the fact's key")

        def write(conn: psycopg.Connection, now: datetime) -> dict:
            facts_chunks_db.lock_users(conn, [user])
            return {"deleted": facts_chunks_db.delete_fact(conn, user, key, category)}

        return self._write(caller, "forget_fact", {"user": user, "key": key, "category": category},
                           idempotency_key, write)

    def write_sketch(self, caller: Caller, session_id: str, section: str, key: str, value: str, *,
                     user_id: str | None = None, scope: str = "session", idempotency_key: str | None = None) -> dict:
        """A session's working note, updated in place by (scope, section, key)."""
        user = caller.one_user(user_id)
        if scope not in ("session", "user"):
            raise ApiError("scope must be session or user")
        if not (section or "").strip() or not (key or "").strip():
            raise ApiError("section and key must not be empty")

        def write(conn: psycopg.Connection, now: datetime) -> dict:
            try:
                write_sketch(conn, user, session_id, section, key, value, scope=scope, at=now,
                             run_id=caller.lineage(now)["run_id"])
            except AccessDenied as exc:
                raise Forbidden(str(exc)) from None
            return {"written": True, "session_id": session_id, "section": section, "key": key, "scope": scope}

        return self._write(caller, "write_sketch", {"user": user, "session": session_id, "section": section,
                                                    "key": key, "value": value, "scope": scope},
                           idempotency_key, write)

    def distill(self, caller: Caller, text: str, *, user_id: str | None = None, mode: str = "llm",
                store: bool = False, idempotency_key: str | None = None) -> dict:
        """Text to typed knowledge entries and relations, through the configured chat back
        end (`llm`) or the deterministic rules (`rules`); `store` persists them with lineage
        `api`."""
        user = caller.one_user(user_id)
        if mode not in ("llm", "rules"):
            raise ApiError("mode must be llm or rules")
        if not (text or "").strip():
            raise ApiError("text must not be empty")

        def run(conn: psycopg.Connection | None, now: datetime) -> dict:
            session = f"api:key-{caller.key.id}"
            fields = {"user_id": user, "role": "user", "content": text, "ts": now.isoformat()}
            messages = [Message(session, 0, user, "user", text, now, hash_message(fields), API, 0)]
            backend: ModelBackend = build_backend(ModelConfig() if mode == "rules" else self._chat())
            try:
                raw, call = backend.synthesize_knowledge(messages, render_transcript(messages), None)
            finally:
                backend.close()
            entries, relations, problems = prepare(raw, messages, session, user)
            answer = {"entries": _jsonable([asdict(e) for e in entries]),
                      "relations": _jsonable([asdict(r) for r in relations]), "rejected": problems,
                      "model": f"{call.backend}/{call.model}", "stored": False}
            if conn is not None:
                lineage_row = {**caller.lineage(now), "session_id": session}
                entries_db.forge_knowledge(conn, [(e, lineage_row) for e in entries])
                entries_db.forge_relations(conn, [(r, {**lineage_row, "user_id": user}) for r in relations])
                answer["stored"] = True
            return answer

        if not store:
            return run(None, datetime.now(UTC))
        return self._write(caller, "distill", {"user": user, "text": text, "mode": mode}, idempotency_key, run)

    # --- forks and merges ----------------------------------------------------------------

    def fork(self, caller: Caller, session_id: str, new_session_id: str, *, at: int | None = None,
             idempotency_key: str | None = None) -> dict:
        """A new session sharing the caller's session's turns up to `at` (default: its last)."""
        if not (new_session_id or "").strip():
            raise ApiError("new_session_id must not be empty")

        def write(conn: psycopg.Connection, now: datetime) -> dict:
            self._own_session(conn, caller, session_id)
            try:
                made = fork_session(conn, session_id, new_session_id, at, actor=f"api:key-{caller.key.id}")
            except ForkError as exc:
                raise ApiError(str(exc)) from None
            return {"fork": asdict(made), "own_turns_start_at": made.fork_seq + 1}

        return self._write(caller, "fork", {"session": session_id, "as": new_session_id, "at": at},
                           idempotency_key, write)

    def merge(self, caller: Caller, fork_session_id: str, parent_session_id: str, mode: str, *,
              dry_run: bool = False, restore: bool = False, idempotency_key: str | None = None) -> dict:
        """Merge a fork into its parent (append, replace, summarize), or with `restore` undo
        the merge in force; `dry_run` answers with the turns a merge would write. The answer
        names the day the parent is distilled again from."""
        writer = build_backend(self._chat()) if mode == "summarize" and not restore else None
        actor = f"api:key-{caller.key.id}"

        def write(conn: psycopg.Connection, now: datetime) -> dict:
            self._own_session(conn, caller, parent_session_id)
            try:
                if restore:
                    restored = restore_merge(conn, fork_session_id, parent_session_id, actor=actor)
                    return {"restored": _jsonable(asdict(restored.merge)), "removed": restored.removed,
                            "brought_back": restored.brought_back, "next_step": restored.merge.next_step}
                report = merge_fork(conn, fork_session_id, parent_session_id, mode, actor=actor, dry_run=dry_run,
                                    writer=writer)
            except ForkError as exc:
                raise ApiError(str(exc)) from None
            return {"merge": _jsonable(asdict(report.merge)), "already": report.already, "dry_run": report.dry_run,
                    "superseded": report.superseded, "next_step": report.merge.next_step,
                    "written": [{"seq": m.seq, "role": m.role, "content": m.content,
                                 "merged_from": m.metadata["merged_from"]} for m in report.written]}

        try:
            if dry_run:
                with self._conn() as conn:
                    return write(conn, datetime.now(UTC))
            return self._write(caller, "restore_merge" if restore else "merge",
                               {"fork": fork_session_id, "into": parent_session_id, "mode": mode},
                               idempotency_key, write)
        finally:
            if writer is not None:
                writer.close()

    # --- helpers -------------------------------------------------------------------------

    def _own_session(self, conn: psycopg.Connection, caller: Caller, session_id: str) -> str:
        """The session's user, when the caller may read it."""
        owner = search_db.session_owner(conn, session_id)
        if owner is None:
            raise NotFound(f"no session {session_id!r} is stored")
        if not caller.key.admin and owner != caller.key.user_id:
            raise Forbidden(f"session {session_id!r} belongs to another user")
        return owner

    def _write(self, caller: Caller, operation: str, request: dict, idempotency_key: str | None,
               write: Callable[[psycopg.Connection, datetime], dict]) -> dict:
        """Run `write` in one transaction; with an idempotency key, at most once: the key is
        claimed first (a concurrent retry waits on it), the answer stored with the write."""
        digest = json_digest(request, sort_keys=True, default=str)
        now = datetime.now(UTC)
        with self._conn() as conn:
            if idempotency_key is not None:
                claim = (caller.key.id, idempotency_key[:200])
                claimed = api_db.claim_idempotency_key(conn, *claim, operation, digest)
                if not claimed:
                    stored_operation, stored_hash, response = api_db.idempotent_answer(conn, *claim)
                    if (stored_operation, stored_hash) != (operation, digest):
                        raise Conflict("this Idempotency-Key was used for another request")
                    return {**response, "replayed": True}
            answer = write(conn, now)
            if idempotency_key is not None:
                api_db.record_idempotent_answer(conn, *claim, answer)
        return {**answer, "replayed": False}

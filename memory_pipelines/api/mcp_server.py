"""`memory-pipelines serve mcp`: memory as MCP tools (the official SDK), over stdio or
streamable HTTP.

A tool call acts as one key's user: over HTTP the request's `Authorization: Bearer <key>`
(a request without a live key is refused with 401 before MCP reads it), over stdio the key
in MEMORY_API_KEY. The tools are the HTTP API's operations (`MemoryService`), so both answer
alike; a refused call is a tool error whose message names what to fix.
"""

from __future__ import annotations

import importlib.metadata
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal

import anyio
import psycopg
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from memory_pipelines.api.asgi import ASGIApp, AccessLog, Receive, Scope, Send, bearer, note_key, send_error
from memory_pipelines.api.access import ApiError, Caller, Unauthorized
from memory_pipelines.api.service import MemoryService
from memory_pipelines.config import ApiSettings
from memory_pipelines.core.fact_extraction import SOURCES
from memory_pipelines.records import DEFAULT_BUDGET_CHARS, MERGE_MODES, SEARCH_SCOPES

log = logging.getLogger("memory_pipelines.api")

INSTRUCTIONS = (
    "Long-term memory of this user's past conversations. Before answering from memory, call "
    "memory_search with the user's question in their words: it returns passages of past turns "
    "(with session, time and whether a newer statement overrides them), facts and notes, within a "
    "character budget. Save what the user asks you to remember with memory(action='save'). "
    "Use context at the start of a session turn, recall for what to bring back automatically.")

Result = dict[str, Any]


def build_server(service: MemoryService) -> MCPServer:
    """The MCP server over `service`: its tools and the `memory_summary` resource."""
    settings = ApiSettings.from_settings(service.settings)
    server = MCPServer("memory-pipelines", instructions=INSTRUCTIONS, version=importlib.metadata.version("memory-pipelines"))

    def caller(ctx: Context) -> Caller:
        headers = ctx.headers
        return service.caller(bearer(headers) if headers is not None else service.settings.api_key)

    async def run(ctx: Context, operation: Callable[[Caller], Result], error: type[Exception] = ToolError) -> Result:
        """`operation` as the call's key, in a worker thread, within the time limit."""
        def call() -> Result:
            return operation(caller(ctx))

        try:
            with anyio.fail_after(settings.timeout):
                return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        except ApiError as exc:
            raise error(f"{exc.code}: {exc.message}") from None
        except TimeoutError:
            raise error(f"timeout: the call took over {settings.timeout:g} s (MEMORY_API_TIMEOUT)") from None
        except psycopg.OperationalError as exc:
            lost = service.database_lost(exc, "answering a tool call")
            if lost is None:
                raise
            raise error(f"database_unavailable: {lost}") from None

    @server.tool(description=(
        "Search this user's memory: facts, passages of past conversation turns, working notes and knowledge "
        "entries, best first, within a budget of characters. Each hit names its source (fact, passage with "
        "session, turn and time, sketch, knowledge) and is marked outdated when a newer statement overrides "
        "it. The text is what to read; the structured result holds the hits with scores and ids (for lineage)."))
    async def memory_search(
            query: Annotated[str, Field(description="the question, in the user's words")],
            ctx: Context,
            scope: Annotated[Literal[SEARCH_SCOPES], Field(  # type: ignore[valid-type]
                description="which stores: all, facts, raw (passages), sketches, knowledge")] = "all",
            budget: Annotated[int, Field(ge=0, description="characters to serve (0: no limit)")] = DEFAULT_BUDGET_CHARS,
            k: Annotated[int, Field(ge=1, le=20, description="most hits per store")] = 5,
            session_id: Annotated[str | None, Field(description="the current session, if any")] = None,
            user_id: Annotated[str | None, Field(description="admin keys only: whose memory")] = None,
            include_forks: Annotated[bool, Field(description="also forked sessions' passages, labelled")] = False,
    ) -> Annotated[CallToolResult, Result]:
        served = await run(ctx, lambda c: service.search(c, query, user_id=user_id, scope=scope, k=k, budget=budget,
                                                         session_id=session_id, include_forks=include_forks))
        # the agent reads the hits as the CLI prints them; a client program gets them structured
        return CallToolResult(content=[TextContent(type="text", text=served["text"])], structured_content=served)

    @server.tool(description=(
        "Search this user's past conversations coarse to fine: the query is matched against the user's scene "
        "tree (months, weeks, days), the best branches are followed into session trees down to chunks, and the "
        "passages inside them are served within a budget of characters, each with the path of tree nodes it "
        "was found through."))
    async def tree_search(
            query: Annotated[str, Field(description="the question, in the user's words")],
            ctx: Context,
            budget: Annotated[int, Field(ge=0, description="characters to serve (0: no limit)")] = DEFAULT_BUDGET_CHARS,
            k: Annotated[int, Field(ge=1, le=20, description="most passages")] = 5,
            user_id: Annotated[str | None, Field(description="admin keys only: whose memory")] = None,
    ) -> Annotated[CallToolResult, Result]:
        served = await run(ctx, lambda c: service.search(c, query, user_id=user_id, scope="raw", k=k, budget=budget,
                                                         mode="forest"))
        return CallToolResult(content=[TextContent(type="text", text=served["text"])], structured_content=served)

    @server.tool(description=(
        "Fork one of this user's sessions: a new session (new_session_id) sharing its turns up to `at` "
        "(default: its last); the fork's own turns start at at + 1. Forks stay out of search unless asked for."))
    async def fork_session(session_id: str, new_session_id: str, ctx: Context,
                           at: Annotated[int | None, Field(ge=0)] = None, idempotency_key: str | None = None) -> Result:
        return await run(ctx, lambda c: service.fork(c, session_id, new_session_id, at=at,
                                                     idempotency_key=idempotency_key))

    @server.tool(description=(
        "Merge a fork's turns into its parent session: mode=append (after the parent's last turn), replace "
        "(the parent's turns after the fork point set aside, restorable) or summarize (one turn condensing "
        "the fork); dry_run=true shows the turns first; restore=true undoes the merge in force. Done once; "
        "the parent is distilled again from the day the answer names."))
    async def merge_fork(fork_session_id: str, parent_session_id: str, ctx: Context,
                         mode: Literal[MERGE_MODES] = "append", dry_run: bool = False,  # type: ignore[valid-type]
                         restore: bool = False, idempotency_key: str | None = None) -> Result:
        return await run(ctx, lambda c: service.merge(c, fork_session_id, parent_session_id, mode, dry_run=dry_run,
                                                      restore=restore, idempotency_key=idempotency_key))

    @server.tool(description=(
        "The user's facts (curated, one value per category and key). action=save upserts a fact (category, "
        "key, value; optional source, confidence 0-100, expires_days, source_context), merging spellings of "
        "the same key; action=forget deletes a fact by key (optional category) with the rows merged into it; "
        "action=list names the categories that hold facts; action=search finds facts matching `query`. "
        "Writes take an idempotency_key so a retried call writes once."))
    async def memory(
            action: Literal["save", "forget", "list", "search"],
            ctx: Context,
            category: str | None = None,
            key: str | None = None,
            value: str | None = None,
            source: Literal[SOURCES] = "user_explicit",  # type: ignore[valid-type]
            confidence: Annotated[int | None, Field(ge=0, le=100)] = None,
            expires_days: Annotated[int | None, Field(ge=1)] = None,
            source_context: str | None = None,
            query: str | None = None,
            idempotency_key: str | None = None,
            user_id: Annotated[str | None, Field(description="admin keys only: whose memory")] = None) -> Result:
        def act(c: Caller) -> Result:
            if action == "save":
                if not (category and key and value):
                    raise ApiError("save needs category, key and value")
                return service.save_fact(c, category, key, value, user_id=user_id, source=source,
                                         confidence=confidence, expires_days=expires_days,
                                         source_context=source_context, idempotency_key=idempotency_key)
            if action == "forget":
                return service.forget_fact(c, key or "", user_id=user_id, category=category,
                                           idempotency_key=idempotency_key)
            if action == "list":
                return service.facts_categories(c, user_id=user_id)
            return service.facts_search(c, query or "", user_id=user_id)

        return await run(ctx, act)

    @server.tool(description=(
        "A session's turn context: its last messages and the prior-summary block, the summary's entries "
        "filtered to what `request` (the next user message) needs. Call it when a session resumes."))
    async def context(session_id: str, ctx: Context, request: str | None = None,
                      limit: Annotated[int | None, Field(ge=0, le=200, description=(
                          "last messages (default: the context window)"))] = None,
                      include_forks: Annotated[bool, Field(description=(
                          "name the session's forks too, labelled as other branches"))] = False) -> Result:
        return await run(ctx, lambda c: service.context(c, session_id, request=request, limit=limit,
                                                        include_forks=include_forks))

    @server.tool(description=(
        "Automatic recall for the next turn: up to k past excerpts relevant to the incoming message and the "
        "recent ones, none the session was already given (a ledger records what was recalled)."))
    async def recall(session_id: str, incoming: str, ctx: Context,
                     recent: Annotated[list[dict[str, str]], Field(
                         description="the last messages: [{role, content}]")] = [],  # noqa: B006 - a schema default
                     k: Annotated[int, Field(ge=1, le=5)] = 2) -> Result:
        return await run(ctx, lambda c: service.recall(c, session_id, incoming, recent=recent, k=k))

    @server.tool(description=(
        "Knowledge entries (typed: fact, preference, event, procedure, user) matching `query`, hybrid "
        "(vector and full text fused by reciprocal rank), each with the newer statement that overrides it."))
    async def knowledge_search(query: str, ctx: Context, k: Annotated[int, Field(ge=1, le=20)] = 5,
                               session_id: str | None = None, process: str | None = None,
                               consent: str | None = None) -> Result:
        return await run(ctx, lambda c: service.knowledge_search(c, query, k=k, session_id=session_id,
                                                                 process=process, consent=consent))

    @server.tool(description=(
        "The entity graph around an entity: its (subject, relation, object) triples with their validity "
        "(hops=1), optionally one relation and as of a time (`at`, ISO 8601); hops=2 adds the entities "
        "within two relations and their distance."))
    async def entity_graph_query(entity: str, ctx: Context, relation: str | None = None,
                                 at: datetime | None = None, hops: Literal[1, 2] = 1) -> Result:
        return await run(ctx, lambda c: service.graph(c, entity, relation=relation, at=at, hops=hops))

    @server.tool(description=(
        "Decay scores of the user's knowledge entries and facts as of the newest message: each score with "
        "the formula's parts (importance, age, accesses, rate, boost) and what decay would do (verdict)."))
    async def decay_score(ctx: Context, limit: Annotated[int, Field(ge=1, le=1000)] = 100) -> Result:
        return await run(ctx, lambda c: service.decay_scores(c, limit=limit))

    @server.tool(description=(
        "The user's turns (or one session's) that decay keeps highest: importance from the knowledge entries "
        "and facts citing each turn, faded with age at a rate importance slows, plus a boost for turns served "
        "often; each with the score's parts. The turns returned count an access."))
    async def turns_by_score(ctx: Context, session_id: str | None = None,
                             k: Annotated[int, Field(ge=1, le=100)] = 10) -> Result:
        return await run(ctx, lambda c: service.turns_by_score(c, session_id=session_id, k=k))

    @server.tool(description=(
        "Distill text into typed knowledge entries and relations, through the configured model (mode=llm) "
        "or deterministic rules (mode=rules). store=true saves them for this user with lineage 'api'."))
    async def distill(text: str, ctx: Context, mode: Literal["llm", "rules"] = "llm", store: bool = False,
                      idempotency_key: str | None = None) -> Result:
        return await run(ctx, lambda c: service.distill(c, text, mode=mode, store=store,
                                                        idempotency_key=idempotency_key))

    @server.tool(description=(
        "Write a working note for a session (scope=session) or for the user (scope=user), updated in place by "
        "section and key; notes are served by memory_search."))
    async def write_sketch(session_id: str, section: str, key: str, value: str, ctx: Context,
                           scope: Literal["session", "user"] = "session",
                           idempotency_key: str | None = None) -> Result:
        return await run(ctx, lambda c: service.write_sketch(c, session_id, section, key, value, scope=scope,
                                                             idempotency_key=idempotency_key))

    @server.tool(description=(
        "Where a row came from: kind fact, chunk, entry, turn or summary, and its id (from a hit; a "
        "session id for summary): the source messages, run, model and calls."))
    async def lineage(kind: str, ident: str, ctx: Context) -> Result:
        return await run(ctx, lambda c: service.lineage(c, kind, ident))

    @server.resource("memory://users/{user_id}/summary", name="memory_summary", mime_type="text/markdown",
                     description="The user's narrative memory summary, rewritten when their facts change.")
    async def memory_summary(user_id: str, ctx: Context) -> str:
        summary = await run(ctx, lambda c: service.memory_summary(c, user_id=user_id), ResourceError)
        return summary["summary"] or f"No memory summary for {user_id} yet."

    return server


class BearerGate:
    """Refuses with 401 an HTTP request without a live key, before MCP reads it."""

    def __init__(self, app: ASGIApp, service: MemoryService):
        self.app, self.service = app, service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            key = (await anyio.to_thread.run_sync(self.service.caller, bearer(scope["headers"]))).key
        except Unauthorized as exc:
            return await send_error(send, 401, exc.code, exc.message, [(b"www-authenticate", b"Bearer")])
        note_key(scope, key.id, key.admin)
        await self.app(scope, receive, send)


def http_app(service: MemoryService, host: str) -> ASGIApp:
    """MCP over streamable HTTP at /mcp: stateless (any worker answers any request) with JSON
    answers, behind the key check and the access log."""
    settings = ApiSettings.from_settings(service.settings)
    app = build_server(service).streamable_http_app(
        stateless_http=True, json_response=True, host=host, max_request_body_size=settings.max_body_bytes)
    return AccessLog(BearerGate(app, service), "mcp")

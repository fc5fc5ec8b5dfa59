"""`memory-pipelines serve http`: the REST API (FastAPI on uvicorn) over `MemoryService`.

Every route but `/healthz` needs `Authorization: Bearer <key>` and acts as the key's user.
Bodies are JSON, unknown fields refused; every error is `{"error": {"code", "message"}}`.
The service's calls block (psycopg, a local embedder), so each runs in a worker thread
under the request's time limit (MEMORY_API_TIMEOUT; the database's statement timeout is the
same, so an abandoned thread ends too).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Annotated, Any, Literal

import anyio
import psycopg
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from memory_pipelines.api.asgi import AccessLog, BodyLimit, bearer, note_key
from memory_pipelines.api.access import ApiError, Caller
from memory_pipelines.api.service import RETRY_AFTER_SECONDS, MemoryService
from memory_pipelines.config import ApiSettings, Settings, load
from memory_pipelines.core.fact_extraction import SOURCES
from memory_pipelines.records import DEFAULT_BUDGET_CHARS, MERGE_MODES, SEARCH_SCOPES

log = logging.getLogger("memory_pipelines.api")

Scope = Literal[SEARCH_SCOPES]  # type: ignore[valid-type]
Source = Literal[SOURCES]  # type: ignore[valid-type]
MergeMode = Literal[MERGE_MODES]  # type: ignore[valid-type]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt field is an error, not a default


class SearchBody(Body):
    q: str = Field(description="the question, in the user's words")
    scope: Scope = "all"
    k: int = Field(5, ge=1, le=20, description="most hits per store")
    budget: int | None = Field(DEFAULT_BUDGET_CHARS, ge=0, description="characters served (0: no limit)")
    budget_tokens: int | None = Field(None, ge=1, description="a budget in estimated tokens instead")
    user_id: str | None = Field(None, description="an admin key's user; a user key's own, or left out")
    session_id: str | None = None
    now: datetime | None = Field(None, description="what 'last week' counts from (default: the user's newest turn)")
    mode: Literal["flat", "forest"] = Field("flat", description="forest: passages by forest recall over the trees")
    include_forks: bool = Field(False, description="serve forked sessions' passages too, labelled with the fork")


class FactBody(Body):
    category: str
    key: str
    value: str
    source: Source = "user_explicit"
    confidence: int | None = Field(None, ge=0, le=100)
    expires_days: int | None = Field(None, ge=1)
    source_context: str | None = None
    session_id: str | None = None
    user_id: str | None = None


class ChatMessage(Body):
    role: str
    content: str


class RecallBody(Body):
    session_id: str
    incoming: str = Field(description="the user's next message")
    recent: list[ChatMessage] = Field(default_factory=list, description="the last messages of the session")
    k: int = Field(2, ge=1, le=5)


class DistillBody(Body):
    text: str
    mode: Literal["llm", "rules"] = "llm"
    store: bool = False
    user_id: str | None = None


class ForkBody(Body):
    session_id: str = Field(description="the session to fork (the caller's)")
    new_session_id: str = Field(description="the fork's session id")
    at: int | None = Field(None, ge=0, description="the last shared turn (default: the session's last)")


class MergeBody(Body):
    fork_session_id: str
    parent_session_id: str
    mode: MergeMode | None = Field(None, description="required unless restore")
    dry_run: bool = False
    restore: bool = Field(False, description="undo the merge in force of the fork into the parent")


class SketchBody(Body):
    session_id: str
    section: str
    key: str
    value: str
    scope: Literal["session", "user"] = "session"
    user_id: str | None = None


def _error(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str]:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return "invalid_json", "the body is not valid JSON (UTF-8): send a JSON object"
    parts = []
    for e in errors[:3]:
        where = ".".join(str(p) for p in e.get("loc", ()) if p not in ("body", "query", "path"))
        message = "unknown field" if e.get("type") == "extra_forbidden" else e.get("msg", "invalid")
        parts.append(f"{where or 'body'}: {message}")
    return "invalid_request", "; ".join(parts)


class UnknownParameter(ApiError):
    code = "unknown_parameter"


def _query_names(dependant) -> set[str]:
    """The query parameters an endpoint takes, its dependencies' too."""
    return {p.alias for p in dependant.query_params}.union(*(_query_names(d) for d in dependant.dependencies))


def _known_parameters_only(request: Request) -> None:
    """A query parameter the endpoint does not take is refused, not ignored: `user=bob` for
    `user_id=bob` would otherwise answer for the key's own user without a word."""
    route = request.scope.get("route")
    if route is None:
        return
    known = _query_names(route.dependant)
    if unknown := sorted(set(request.query_params) - known):
        raise UnknownParameter(f"unknown query parameter(s) {', '.join(unknown)}: {request.url.path} takes "
                               f"{', '.join(sorted(known)) or 'none'}")


def create_app(process_settings: Settings, service: MemoryService | None = None) -> Any:
    """The API as an ASGI app. Without `service`, the process opens its own from its
    settings when it starts (as each `--workers` process does) and closes it on shutdown."""
    settings = ApiSettings.from_settings(process_settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.service = service or await anyio.to_thread.run_sync(MemoryService.open, process_settings)
        try:
            yield
        finally:
            if service is None:
                app.state.service.close()
            log.info("API server stopped")

    app = FastAPI(title="memory-pipelines", version="1", lifespan=lifespan, dependencies=[Depends(_known_parameters_only)],
                  description="Long-term memory of agent conversations: search within a context budget, facts, "
                              "session context, knowledge, the entity graph, lineage. Send `Authorization: "
                              "Bearer <key>` (`memory-pipelines keys create --user U`); a key acts for its user.")

    async def run(request: Request, operation: Callable[[Caller], dict]) -> dict:
        """`operation` as the request's key, in a worker thread, within the time limit."""
        service: MemoryService = request.app.state.service

        def call() -> dict:
            caller = service.caller(bearer(request.headers))
            note_key(request.scope, caller.key.id, caller.key.admin)
            return operation(caller)

        with anyio.fail_after(settings.timeout):
            return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)

    @app.exception_handler(ApiError)
    async def refused(request: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return _error(exc.status, exc.code, exc.message, headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        code, message = _validation_message(exc)
        return _error(400 if code == "invalid_json" else 422, code, message)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(TimeoutError)
    async def timed_out(request: Request, exc: TimeoutError) -> JSONResponse:
        return _error(504, "timeout", f"the request took over {settings.timeout:g} s (MEMORY_API_TIMEOUT)")

    @app.exception_handler(psycopg.errors.QueryCanceled)
    async def cancelled(request: Request, exc: Exception) -> JSONResponse:
        return _error(504, "timeout", f"the database took over {settings.timeout:g} s (MEMORY_API_TIMEOUT)")

    @app.exception_handler(psycopg.OperationalError)
    async def database_down(request: Request, exc: Exception) -> JSONResponse:
        lost = request.app.state.service.database_lost(exc, f"answering {request.url.path}")
        log.error("database unavailable: %s", lost or (str(exc).splitlines()[0] if str(exc) else type(exc).__name__))
        return _error(503, "database_unavailable", lost or f"the database cannot be reached; try again in "
                      f"{RETRY_AFTER_SECONDS} s", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return _error(500, "internal_error", "the server failed on this request; its log names the cause")

    @app.get("/healthz", summary="the server and its database answer")
    async def healthz(request: Request) -> JSONResponse:
        try:
            with anyio.fail_after(min(5.0, settings.timeout)):
                return JSONResponse(await anyio.to_thread.run_sync(request.app.state.service.health))
        except (psycopg.Error, TimeoutError):
            return _error(503, "database_unavailable", "the database does not answer",
                          headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    @app.get("/v1/search", summary="unified search within a context budget")
    async def search(request: Request, q: Annotated[str, Query(description="the question")],
                     scope: Scope = "all", k: Annotated[int, Query(ge=1, le=20)] = 5,
                     budget: Annotated[int | None, Query(ge=0)] = DEFAULT_BUDGET_CHARS,
                     budget_tokens: Annotated[int | None, Query(ge=1)] = None, user_id: str | None = None,
                     session_id: str | None = None, now: datetime | None = None,
                     mode: Literal["flat", "forest"] = "flat", include_forks: bool = False) -> dict:
        return await run(request, lambda c: request.app.state.service.search(
            c, q, user_id=user_id, scope=scope, k=k, budget=budget, budget_tokens=budget_tokens,
            session_id=session_id, now=now, mode=mode, include_forks=include_forks))

    @app.post("/v1/search", summary="unified search, the question in a JSON body")
    async def search_body(request: Request, body: SearchBody) -> dict:
        return await run(request, lambda c: request.app.state.service.search(
            c, body.q, user_id=body.user_id, scope=body.scope, k=body.k, budget=body.budget,
            budget_tokens=body.budget_tokens, session_id=body.session_id, now=body.now, mode=body.mode,
            include_forks=body.include_forks))

    @app.get("/v1/facts", summary="search facts (q), or list the categories that hold facts (no q)")
    async def facts(request: Request, q: str | None = None, user_id: str | None = None,
                    k: Annotated[int, Query(ge=1, le=20)] = 15) -> dict:
        service: MemoryService = request.app.state.service
        if q is None:
            return await run(request, lambda c: service.facts_categories(c, user_id=user_id))
        return await run(request, lambda c: service.facts_search(c, q, user_id=user_id, k=k))

    @app.post("/v1/facts", summary="save a fact: upsert by (category, key), spellings merged")
    async def save_fact(request: Request, body: FactBody) -> dict:
        fields = body.model_dump(exclude={"category", "key", "value"})
        return await run(request, lambda c: request.app.state.service.save_fact(
            c, body.category, body.key, body.value, idempotency_key=request.headers.get("idempotency-key"),
            **fields))

    @app.delete("/v1/facts/{key}", summary="forget a fact by key (and the rows merged into it)")
    async def forget_fact(request: Request, key: str, category: str | None = None,
                          user_id: str | None = None) -> dict:
        return await run(request, lambda c: request.app.state.service.forget_fact(
            c, key, user_id=user_id, category=category, idempotency_key=request.headers.get("idempotency-key")))

    @app.get("/v1/context/{session_id}", summary="a session's turn context: last messages, prior summary")
    async def context(request: Request, session_id: str, request_text: Annotated[str | None, Query(
                          alias="request", description="the next user message: the summary is filtered to it")] = None,
                      limit: Annotated[int | None, Query(ge=0, le=200, description=(
                          "last messages (default: the context window, MEMORY_CONTEXT_MESSAGES)"))] = None, all_entries: bool = False,
                      include_forks: bool = False) -> dict:
        return await run(request, lambda c: request.app.state.service.context(
            c, session_id, request=request_text, limit=limit, all_entries=all_entries, include_forks=include_forks))

    @app.post("/v1/recall", summary="automatic recall for the next turn (recorded in the session's ledger)")
    async def recall(request: Request, body: RecallBody) -> dict:
        return await run(request, lambda c: request.app.state.service.recall(
            c, body.session_id, body.incoming, recent=[m.model_dump() for m in body.recent], k=body.k))

    @app.get("/v1/knowledge/search", summary="knowledge entries, hybrid (vector and full text, RRF)")
    async def knowledge_search(request: Request, q: str, k: Annotated[int, Query(ge=1, le=20)] = 5,
                               user_id: str | None = None, session_id: str | None = None,
                               process: str | None = None, consent: str | None = None) -> dict:
        return await run(request, lambda c: request.app.state.service.knowledge_search(
            c, q, user_id=user_id, k=k, session_id=session_id, process=process, consent=consent))

    @app.get("/v1/graph", summary="the entity graph around an entity: 1 or 2 hops, a relation, as of a time")
    async def entity_graph(request: Request, entity: str, relation: str | None = None, at: datetime | None = None,
                           hops: Annotated[int, Query(ge=1, le=2)] = 1, user_id: str | None = None) -> dict:
        return await run(request, lambda c: request.app.state.service.graph(
            c, entity, user_id=user_id, relation=relation, at=at, hops=hops))

    @app.get("/v1/decay-score", summary="decay scores with the formula's parts and decay's verdict")
    async def decay_score(request: Request, user_id: str | None = None,
                          limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> dict:
        return await run(request, lambda c: request.app.state.service.decay_scores(c, user_id=user_id, limit=limit))

    @app.get("/v1/turns/by-score", summary="the turns decay keeps highest (navra's get_turns_by_score), with "
                                            "their score's parts")
    async def turns_by_score(request: Request, user_id: str | None = None, session_id: str | None = None,
                             k: Annotated[int, Query(ge=1, le=100)] = 10) -> dict:
        return await run(request, lambda c: request.app.state.service.turns_by_score(
            c, user_id=user_id, session_id=session_id, k=k))

    @app.post("/v1/distill", summary="text to typed knowledge entries (llm or rules); store persists them")
    async def distill(request: Request, body: DistillBody) -> dict:
        return await run(request, lambda c: request.app.state.service.distill(
            c, body.text, user_id=body.user_id, mode=body.mode, store=body.store,
            idempotency_key=request.headers.get("idempotency-key")))

    @app.post("/v1/sketches", summary="write a session's working note, in place by (scope, section, key)")
    async def sketches(request: Request, body: SketchBody) -> dict:
        return await run(request, lambda c: request.app.state.service.write_sketch(
            c, body.session_id, body.section, body.key, body.value, user_id=body.user_id, scope=body.scope,
            idempotency_key=request.headers.get("idempotency-key")))

    @app.post("/v1/forks", summary="fork a session: a new session sharing its turns up to `at`")
    async def fork(request: Request, body: ForkBody) -> dict:
        return await run(request, lambda c: request.app.state.service.fork(
            c, body.session_id, body.new_session_id, at=body.at, idempotency_key=request.headers.get("idempotency-key")))

    @app.post("/v1/merges", summary="merge a fork into its parent (append, replace, summarize), or restore it")
    async def merge(request: Request, body: MergeBody) -> dict:
        if body.mode is None and not body.restore:
            raise ApiError("mode is required (append, replace or summarize) unless restore is true")
        return await run(request, lambda c: request.app.state.service.merge(
            c, body.fork_session_id, body.parent_session_id, body.mode or "append", dry_run=body.dry_run,
            restore=body.restore, idempotency_key=request.headers.get("idempotency-key")))

    @app.get("/v1/lineage/{kind}/{ident}", summary="where a row came from: messages, run, model, calls")
    async def row_lineage(request: Request, kind: str, ident: str) -> dict:
        return await run(request, lambda c: request.app.state.service.lineage(c, kind, ident))

    @app.get("/v1/summary", summary="the user's narrative memory summary")
    async def summary(request: Request, user_id: str | None = None) -> dict:
        return await run(request, lambda c: request.app.state.service.memory_summary(c, user_id=user_id))

    return AccessLog(BodyLimit(app, settings.max_body_bytes), "http")


def build_app() -> Any:
    """The app a `--workers` process imports (`uvicorn --factory`), with the settings
    `serve` handed it."""
    return create_app(load())

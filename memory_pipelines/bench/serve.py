"""`bench serve`: a bounded load run against the project's own servers on 127.0.0.1.

Over the configured database (the distilled sample, or any other), a key is made for one
user, `serve http` and `serve mcp --http` are started as they are in production (child
processes, one access line per request to a log file), and N concurrent clients issue
searches for a fixed time through each: HTTP `GET /v1/search`, and the MCP tool
`memory_search` over streamable HTTP (each client its own MCP session). The questions are
the sample's retrieval questions for that user and questions made of the user's fact keys,
in turn. Requests/s, latency percentiles and errors are reported per transport; the key is
revoked at the end. The load generator shares the machine with the server: on a small
machine its own CPU time is part of what is measured (the report gives the load average).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack, closing
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import psycopg

from memory_pipelines.api import keys
from memory_pipelines.bench.needles import QUESTIONS
from memory_pipelines.bench.search.timing import Latency, load_average
from memory_pipelines.db import bench as bench_db
from memory_pipelines.config import Settings, child_environment
from memory_pipelines.embed import embed_config
from memory_pipelines.ports import free_port

TRANSPORTS = ("http", "mcp")
LOOPBACK = "127.0.0.1"
ERROR_EXAMPLES = 5


class ServeBenchError(RuntimeError):
    """The benchmark cannot run: no memory to search, or a server that does not start."""


@dataclass(frozen=True)
class ServeBenchConfig:
    clients: int = 50
    seconds: float = 30.0
    transports: tuple[str, ...] = TRANSPORTS
    workers: int = 1  # `serve http --workers`
    user: str | None = None  # default: the user with the most facts
    budget: int | None = None  # characters per answer (default: the API's)

    def __post_init__(self) -> None:
        if not 1 <= self.clients <= 1000:
            raise ValueError(f"--clients {self.clients}: from 1 to 1000 concurrent clients")
        if not 0 < self.seconds <= 3600:
            raise ValueError(f"--seconds {self.seconds}: more than 0, at most 3600")
        if not 1 <= self.workers <= 32:
            raise ValueError(f"--workers {self.workers}: from 1 to 32")
        unknown = set(self.transports) - set(TRANSPORTS)
        if unknown or not self.transports:
            raise ValueError(f"--transport: one or more of {', '.join(TRANSPORTS)}")


@dataclass(frozen=True)
class TransportLoad:
    transport: str
    requests: int  # answered within the run, errors included
    errors: int
    seconds: float
    requests_per_s: float
    latency: Latency | None  # of the requests answered without error
    error_examples: tuple[str, ...]


@dataclass(frozen=True)
class ServeBenchResult:
    user: str
    embedder: str  # what every search embeds its question with (MEMORY_EMBED_*)
    questions: int
    clients: int
    seconds: float
    workers: int
    cores: int
    facts: int
    turns: int
    load_average: tuple[float, float]  # before, after
    transports: tuple[TransportLoad, ...]
    server_log: str


@dataclass
class _Tally:
    latencies: list[float]
    errors: list[str]

    def record(self, started: float, error: str | None) -> None:
        if error is None:
            self.latencies.append(time.perf_counter() - started)
        else:
            self.errors.append(error)


def bench_questions(conn: psycopg.Connection, user: str) -> list[str]:
    """The sample's retrieval questions for `user`, then one per fact key ("which ledger api
    port?"), so that every search has something of the user's to find."""
    sample = json.loads(QUESTIONS.read_text())
    asked = [q["question"] for q in sample if q["user"] == user]
    asked += [f"what about {key.replace('_', ' ')}?" for key in bench_db.fact_keys(conn, user)]
    return asked


async def _load(clients: int, questions: list[str], call_factory, deadline: float) -> _Tally:
    """`clients` workers, each with its own connection (`call_factory` opens one in an exit
    stack and returns its call), asking in turn until `deadline`."""
    tally = _Tally([], [])

    async def client(number: int) -> None:
        async with AsyncExitStack() as stack:
            call = await call_factory(stack)
            i = number
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    error = await call(questions[i % len(questions)])
                except Exception as exc:  # a failed request is a result here, not a crash
                    error = f"{type(exc).__name__}: {exc}"[:200]
                tally.record(started, error)
                i += clients

    await asyncio.gather(*(client(n) for n in range(clients)))
    return tally


def _http_calls(url: str, secret: str, budget: int | None):
    async def factory(stack: AsyncExitStack):
        client = await stack.enter_async_context(httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {secret}"}, timeout=60))

        async def call(question: str) -> str | None:
            params = {"q": question} | ({"budget": budget} if budget is not None else {})
            answer = await client.get("/v1/search", params=params)
            return None if answer.status_code == 200 else f"HTTP {answer.status_code}: {answer.text[:150]}"
        return call
    return factory


def _mcp_calls(url: str, secret: str, budget: int | None):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def factory(stack: AsyncExitStack):
        client = await stack.enter_async_context(httpx.AsyncClient(
            headers={"Authorization": f"Bearer {secret}"}, timeout=60))
        read, write, *_ = await stack.enter_async_context(streamable_http_client(f"{url}/mcp", http_client=client))
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()

        async def call(question: str) -> str | None:
            arguments = {"query": question} | ({"budget": budget} if budget is not None else {})
            result = await session.call_tool("memory_search", arguments)
            return f"tool error: {result.content[0].text[:150]}" if result.is_error else None
        return call
    return factory


def _measure(transport: str, config: ServeBenchConfig, questions: list[str], factory) -> TransportLoad:
    async def run() -> tuple[_Tally, float]:
        # a short warm-up (first searches load what a server loads once) outside the count
        await _load(min(4, config.clients), questions, factory, time.perf_counter() + min(2.0, config.seconds))
        started = time.perf_counter()
        tally = await _load(config.clients, questions, factory, started + config.seconds)
        return tally, time.perf_counter() - started

    tally, elapsed = asyncio.run(run())
    answered = len(tally.latencies) + len(tally.errors)
    return TransportLoad(transport, answered, len(tally.errors), round(elapsed, 2), round(answered / elapsed, 1),
                         Latency.of(tally.latencies) if tally.latencies else None,
                         tuple(dict.fromkeys(tally.errors))[:ERROR_EXAMPLES])


def _start(args: list[str], env: dict, log: Path, ready: str, seconds: float = 120) -> subprocess.Popen:
    port = args[args.index("--port") + 1]
    with log.open("a") as out:
        proc = subprocess.Popen([sys.executable, "-c", "from memory_pipelines.cli import main; raise SystemExit(main())",
                                 "serve", *args, "--host", LOOPBACK], env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServeBenchError(f"`serve {' '.join(args)}` exited {proc.returncode}: see {log}")
        try:
            httpx.get(f"http://{LOOPBACK}:{port}{ready}", timeout=2)
            return proc
        except httpx.TransportError:
            time.sleep(0.2)
    _stop(proc)
    raise ServeBenchError(f"`serve {' '.join(args)}` did not answer in {seconds:.0f} s: see {log}")


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run(settings: Settings, config: ServeBenchConfig,
        progress: Callable[[str], None] = lambda line: None) -> ServeBenchResult:
    """Load `serve http` and `serve mcp --http` over the database of `settings` (MEMORY_DATABASE_URL)."""
    url = settings.database_url
    with closing(psycopg.connect(url, autocommit=True)) as conn:
        user = config.user or bench_db.busiest_user(conn)
        if user is None:
            raise ServeBenchError("the database holds no facts to search: `memory-pipelines run` distills the sample")
        facts, turns = bench_db.user_size(conn, user)
        if not facts and not turns:
            raise ServeBenchError(f"user {user!r} has no memory in this database: name one with --user")
        questions = bench_questions(conn, user)
        if not questions:
            raise ServeBenchError(f"user {user!r} has no facts to ask about and no sample questions: name one with --user")
        key, secret = keys.create_key(conn, user, name="bench serve")
    env = child_environment(replace(settings, api_key=None))
    log = Path(tempfile.mkdtemp(prefix="memory-bench-serve-")) / "server.log"
    before = load_average()
    loads = []
    try:
        for transport in config.transports:
            port = str(free_port())
            if transport == "http":
                proc = _start(["http", "--port", port, "--workers", str(config.workers)], env, log, "/healthz")
                factory = _http_calls(f"http://{LOOPBACK}:{port}", secret, config.budget)
            else:
                proc = _start(["mcp", "--http", "--port", port], env, log, "/mcp")
                factory = _mcp_calls(f"http://{LOOPBACK}:{port}", secret, config.budget)
            progress(f"{transport}: {config.clients} clients for {config.seconds:g} s ...")
            try:
                loads.append(_measure(transport, config, questions, factory))
            finally:
                _stop(proc)
            last = loads[-1]
            progress(f"{transport}: {last.requests} requests, {last.requests_per_s} /s, {last.errors} errors")
    finally:
        with closing(psycopg.connect(url, autocommit=True)) as conn:
            keys.revoke_key(conn, key.id)
    embedding = embed_config(settings)
    return ServeBenchResult(user, f"{embedding.backend}/{embedding.model}", len(questions), config.clients, config.seconds, config.workers, os.cpu_count() or 0,
                            facts, turns, (before, load_average()), tuple(loads), str(log))


def markdown(result: ServeBenchResult) -> str:
    lines = [f"serve load: {result.clients} concurrent clients for {result.seconds:g} s per transport, user "
             f"{result.user} ({result.facts:,} facts, {result.turns:,} turns, {result.questions} questions in turn), "
             f"embedder {result.embedder}, `serve http --workers {result.workers}`, 127.0.0.1", "",
             "| transport | requests | requests/s | p50 ms | p95 ms | p99 ms | errors |", "|---|---|---|---|---|---|---|"]
    for t in result.transports:
        name = "HTTP GET /v1/search" if t.transport == "http" else "MCP memory_search (streamable HTTP)"
        lat = t.latency
        cells = f"{lat.p50_ms:.1f} | {lat.p95_ms:.1f} | {lat.p99_ms:.1f}" if lat else "– | – | –"
        lines.append(f"| {name} | {t.requests:,} | {t.requests_per_s:.1f} | {cells} | {t.errors} |")
    for t in result.transports:
        lines += [f"{t.transport} error: {e}" for e in t.error_examples]
    lines += ["", f"load average {result.load_average[0]:.2f} before, {result.load_average[1]:.2f} after, on "
                  f"{result.cores} cores (the load generator runs on the same machine); server log {result.server_log}"]
    return "\n".join(lines)


def to_json(result: ServeBenchResult) -> str:
    from dataclasses import asdict

    return json.dumps(asdict(result), indent=2)

"""The benchmark database: its parameters and name, the rows made in seeded batches and
copied in, the indexes built after the load, and reuse while the parameters match
(`memory_pipelines.bench.database`)."""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
from memory_pipelines.db.vectors import register_vector_types

from memory_pipelines.bench.database import reused_or_built
from memory_pipelines.bench.search.generate import WordModel, bulk_embedder
from memory_pipelines.db import bench as bench_db
from memory_pipelines.db import search as search_db
from memory_pipelines.embed import Embedder

DATABASE_PREFIX = "memory_bench_search"
# Bump when the generated data changes: a database built by another version is rebuilt.
DATA_VERSION = "bench-search-v1"
TURN_DATA_VERSION = "bench-turns-v2"  # of the turn-level load, recorded only when there is one
BATCH_ROWS = 5_000
SESSION_TURNS = 20  # turns per session of the turn-level load
FACT_VALUE_WORDS = (3, 12)
SESSION_CHUNKS = 5  # mean chunks per session
SPAN_DAYS = 365
START = datetime(2026, 1, 1, tzinfo=UTC)
CATEGORIES = ("preference", "project", "environment", "decision", "personal", "tooling")


@dataclass(frozen=True)
class SearchBenchConfig:
    users: int = 1_000
    chunks: int = 1_000_000
    facts: int = 100_000
    queries: int = 300
    seed: int = 0
    warmup: int = 20
    turns: int = 0  # the turn-level index (memory_turns): messages over the users, evenly

    def __post_init__(self) -> None:
        if (self.users < 1 or self.chunks < self.users or self.facts < 0 or self.queries < 1 or self.warmup < 0
                or self.turns < 0):
            raise ValueError("need users >= 1, chunks >= users, facts >= 0, turns >= 0, queries >= 1")

    @property
    def database(self) -> str:
        turns = f"_t{self.turns}" if self.turns else ""
        return f"{DATABASE_PREFIX}_u{self.users}_c{self.chunks}_f{self.facts}{turns}_s{self.seed}"


@dataclass(frozen=True)
class TurnIndexSize:
    table_bytes: int
    index_bytes: int
    load_seconds: float  # rows copied in, their lexemes and lengths computed
    index_seconds: float  # the secondary indexes (full text, per user) built after the load


# --- building the database --------------------------------------------------------------


def _params(config: SearchBenchConfig, embedder: Embedder) -> dict:
    return {"users": config.users, "chunks": config.chunks, "facts": config.facts, "seed": config.seed,
            "embedder": embedder.model_id, "data_version": DATA_VERSION,
            **({"turns": config.turns, "turn_data_version": TURN_DATA_VERSION} if config.turns else {})}


def _session_plan(rng: np.random.Generator, users: np.ndarray, state: dict) -> list[tuple[str, int]]:
    """Session id and sequence start of each chunk, per user in order."""
    out = []
    for user in users.tolist():
        session, left, seq = state.get(user, (0, 0, 0))
        if left == 0:
            session, left, seq = session + 1, int(rng.geometric(1 / SESSION_CHUNKS)), 0
        out.append((f"bench-{user + 1:05d}-{session:05d}", seq))
        state[user] = (session, left - 1, seq + 1)
    return out


def _chunk_batches(config: SearchBenchConfig, model: WordModel, embed, model_id: str) -> Iterator[list[tuple]]:
    rng = np.random.default_rng([config.seed, 2])
    state: dict = {}
    step = timedelta(days=SPAN_DAYS) / config.chunks
    for start in range(0, config.chunks, BATCH_ROWS):
        count = min(BATCH_ROWS, config.chunks - start)
        # the first chunks give every user one, so none is empty
        users = np.where(np.arange(start, start + count) < config.users, np.arange(start, start + count),
                         rng.integers(0, config.users, size=count))
        texts = model.chunk_texts(rng, users)
        crumbs = [model.breadcrumbs(rng, u) for u in users.tolist()]
        vectors = embed([t[:2000] + "\n" + ", ".join(c) for t, c in zip(texts, crumbs)])
        rows = []
        for i, (user, text, crumb, vector, (session, seq)) in enumerate(
                zip(users.tolist(), texts, crumbs, vectors, _session_plan(rng, users, state))):
            ended = START + step * (start + i)
            messages = text.count("\n") + 1
            rows.append((f"bench-user-{user + 1:05d}", session, seq * 20 + 1, seq * 20 + messages,
                         ended - timedelta(minutes=messages), ended, text,
                         hashlib.blake2b(text.encode(), digest_size=16).hexdigest(), crumb, messages,
                         ended.date().isoformat(), "bench", "bench", "bench", vector, model_id))
        yield rows


def _prefetched(batches: Iterator[list[tuple]], depth: int = 2) -> Iterator[list[tuple]]:
    """Batches made in a thread while the server loads the previous one."""
    ready: queue.Queue = queue.Queue(maxsize=depth)
    done = object()

    def produce() -> None:
        try:
            for batch in batches:
                ready.put(batch)
        except BaseException as exc:  # handed to the consumer, which raises it
            ready.put(exc)
        ready.put(done)

    threading.Thread(target=produce, name="bench-search-generator", daemon=True).start()
    while (item := ready.get()) is not done:
        if isinstance(item, BaseException):
            raise item
        yield item


def _load_chunks(conn: psycopg.Connection, config: SearchBenchConfig, model: WordModel, embed, model_id: str,
                 progress: Callable[[str], None]) -> None:
    loaded = 0
    for number, rows in enumerate(_prefetched(_chunk_batches(config, model, embed, model_id)), start=1):
        with conn.transaction():
            bench_db.copy_chunks(conn, rows)
        loaded += len(rows)
        if number % 20 == 0 or loaded == config.chunks:
            progress(f"chunks: {loaded:,} / {config.chunks:,}")


def _load_facts(conn: psycopg.Connection, config: SearchBenchConfig, model: WordModel, embed, model_id: str,
                progress: Callable[[str], None]) -> None:
    rng = np.random.default_rng([config.seed, 3])
    taken: set[tuple[int, str, str]] = set()
    step = timedelta(days=SPAN_DAYS) / max(1, config.facts)
    for start in range(0, config.facts, BATCH_ROWS):
        count = min(BATCH_ROWS, config.facts - start)
        rows = []
        for i, user in enumerate(rng.integers(0, config.users, size=count).tolist()):
            category = CATEGORIES[int(rng.integers(0, len(CATEGORIES)))]
            key = "_".join(model.phrase(rng, user, int(rng.integers(1, 4))).split())
            while (user, category, key) in taken:
                key += "_" + str(int(rng.integers(2, 10)))
            taken.add((user, category, key))
            value = model.phrase(rng, user, int(rng.integers(FACT_VALUE_WORDS[0], FACT_VALUE_WORDS[1] + 1)))
            seen = START + step * (start + i)
            rows.append((user, category, key, value, seen, int(rng.integers(50, 101))))
        vectors = embed([f"[{c}] {k.replace('_', ' ')}: {v}" for _, c, k, v, _, _ in rows])
        fact_rows = ((f"bench-user-{user + 1:05d}", category, key, key, value, "conversation", confidence, seen,
                      f"bench-{user + 1:05d}-00001", 1, 2, seen.date().isoformat(), "bench", "bench", "bench", vector,
                      model_id)
                     for (user, category, key, value, seen, confidence), vector in zip(rows, vectors))
        with conn.transaction():
            bench_db.copy_facts(conn, fact_rows)
    progress(f"facts: {config.facts:,}")


def _turn_batches(config: SearchBenchConfig, model: WordModel, embed, model_id: str) -> Iterator[list[tuple]]:
    """Sessions of 20 turns in time order, users taking turns, each session's turns written
    together as the pipeline writes them (per session); a turn is embedded alone (latency
    does not depend on what a vector says)."""
    rng = np.random.default_rng([config.seed, 4])
    step = timedelta(days=SPAN_DAYS) / config.turns
    roles = ("user", "assistant", "assistant", "tool")
    for start in range(0, config.turns, BATCH_ROWS):
        count = min(BATCH_ROWS, config.turns - start)
        numbers = np.arange(start, start + count)
        session = numbers // SESSION_TURNS  # the n-th session of the whole load
        users = session % config.users
        texts = model.turn_texts(rng, users)
        vectors = embed(texts)
        rows = []
        for n, user, s, text, vector in zip(numbers.tolist(), users.tolist(), session.tolist(), texts, vectors):
            pos = n % SESSION_TURNS
            rows.append((f"bench-{user + 1:05d}-t{s // config.users:05d}", pos, f"bench-user-{user + 1:05d}",
                         pos, roles[pos % 4] if pos else "user", START + step * n, text, vector, model_id))
        yield rows


def _load_turns(conn: psycopg.Connection, config: SearchBenchConfig, model: WordModel, embed, model_id: str,
                progress: Callable[[str], None]) -> None:
    """Copied into a staging table, then indexed by the same functions the pipeline's rows are."""
    loaded = 0
    for number, rows in enumerate(_prefetched(_turn_batches(config, model, embed, model_id)), start=1):
        with conn.transaction():
            bench_db.insert_turns(conn, rows)
        loaded += len(rows)
        if number % 40 == 0 or loaded == config.turns:
            progress(f"turns: {loaded:,} / {config.turns:,}")
    bench_db.insert_turn_stats(conn)


def build(url: str, config: SearchBenchConfig, embedder: Embedder,
          progress: Callable[[str], None] = lambda _: None) -> TurnIndexSize | None:
    """Fill the (migrated, empty) benchmark database; returns, with turns, what their index costs."""
    began = time.perf_counter()
    model = WordModel(config.seed, config.users)
    embed = bulk_embedder(embedder)
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector_types(conn)
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute("SET synchronous_commit = off")  # an interrupted build is rebuilt anyway
        saved = {}
        for table in ("memory_chunks", "memory_facts", "memory_turns"):
            saved[table] = bench_db.secondary_indexes(conn, table)
            for name, _ in saved[table]:
                search_db.drop_index(conn, name)
        _load_chunks(conn, config, model, embed, embedder.model_id, progress)
        _load_facts(conn, config, model, embed, embedder.model_id, progress)
        turns_began = time.perf_counter()
        if config.turns:
            _load_turns(conn, config, model, embed, embedder.model_id, progress)
        loaded = time.perf_counter()
        progress(f"rows loaded in {loaded - began:.0f}s; building indexes")
        index_seconds = 0.0
        for table, indexes in saved.items():
            started = time.perf_counter()
            for _, definition in indexes:
                conn.execute(definition)
            bench_db.vacuum_analyze(conn, table)
            if table == "memory_turns":
                index_seconds = time.perf_counter() - started
        if not config.turns:
            return None
        table_bytes, index_bytes = bench_db.turn_index_bytes(conn)
        size = TurnIndexSize(table_bytes, index_bytes, round(loaded - turns_began, 1), round(index_seconds, 1))
        bench_db.add_turn_build_columns(conn)
        bench_db.record_turn_build(conn, size.load_seconds, size.index_seconds)
    return size


def prepare_database(admin_url: str, config: SearchBenchConfig, embedder: Embedder, *, rebuild: bool = False,
                     progress: Callable[[str], None] = lambda _: None) -> tuple[str, bool, float | None,
                                                                                   TurnIndexSize | None]:
    """The benchmark database's URL, whether it was reused, and its build time. Only ever
    creates or drops the database named for `config`, never the one `admin_url` names."""
    name = config.database
    built: list[TurnIndexSize | None] = []

    def fill(url: str) -> None:
        progress(f"building {name}: {config.chunks:,} chunks, {config.facts:,} facts, {config.turns:,} turns, "
                 f"{config.users:,} users")
        built.append(build(url, config, embedder, progress))

    url, reused, seconds = reused_or_built(admin_url, name, _params(config, embedder), fill, rebuild=rebuild,
                                           progress=progress)
    if reused:
        return url, True, seconds, _turn_size(url, config)
    progress(f"built in {seconds:.0f}s")
    return url, False, seconds, built[0]


def _turn_size(url: str, config: SearchBenchConfig) -> TurnIndexSize | None:
    """A reused database's turn index: its size now, its build times as recorded."""
    if not config.turns:
        return None
    with psycopg.connect(url) as conn:
        bench_db.add_turn_build_columns(conn)
        table_bytes, index_bytes = bench_db.turn_index_bytes(conn)
        load, index = bench_db.turn_build_seconds(conn)
    return TurnIndexSize(table_bytes, index_bytes, load or 0.0, index or 0.0)

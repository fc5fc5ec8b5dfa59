"""`bench search`: latency and recall of the query module at scale, on a synthetic database.

A separate database on the configured server (`memory_bench_search_u<users>_c<chunks>_f<facts>_s<seed>`,
never the pipeline's own) holds N chunks and M facts over U users, written by a seeded word
model (Zipf over function words, the generator's developer vocabulary and a long tail of
made-up words, each user with topic words of their own) and embedded with the benchmark's
embedder; rows arrive in time order with users interleaved, as the pipeline writes them. The
database is reused while its parameters (recorded in `bench_search_meta`) match.

Over a seeded query set drawn from the data (a user, and 2-4 content words of one of their
chunks or facts, in a question template), each search path is timed once per query, a pass
per path (so a query rarely finds its user's rows in shared buffers, as on a server serving
many users), one search object per request, with the query embedding precomputed (without)
and computed in the call (with); recall@10 of the vector queries is measured against an
exact search in numpy over that user's rows.

The tables other searches read (messages, sketches, knowledge entries) stay empty.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import re
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql
from psycopg.types.json import Jsonb

from memory_pipelines.db.migrations import MigrationError, migrate
from memory_pipelines.db.queries import query
from memory_pipelines.embed import Embedder, HashingEmbedder
from memory_pipelines.generator import CITIES, EDITORS, LANGUAGES, SERVICES, TOPICS
from memory_pipelines.rules.text import STOPWORDS, content_words
from memory_pipelines.passages import TurnSearch
from memory_pipelines.search import UnifiedMemorySearch

DATABASE_PREFIX = "memory_bench_search"
# Bump when the generated data changes: a database built by another version is rebuilt.
DATA_VERSION = "bench-search-v1"
TURN_DATA_VERSION = "bench-turns-v2"  # of the turn-level load, recorded only when there is one
RECALL_K = 10
BATCH_ROWS = 5_000
CHUNK_WORDS = (40, 600)  # words per chunk, uniform: about 2,200 characters on average (the packer's cap is 4,000)
TURN_WORDS = (8, 60)
SESSION_TURNS = 20  # turns per session of the turn-level load
FACT_VALUE_WORDS = (3, 12)
TOPIC_WORDS = 40  # a user's own words
TOPIC_SHARE = 0.15  # of a chunk's words
SESSION_CHUNKS = 5  # mean chunks per session
SPAN_DAYS = 365
START = datetime(2026, 1, 1, tzinfo=UTC)
CATEGORIES = ("preference", "project", "environment", "decision", "personal", "tooling")
QUESTION_TEMPLATES = ("{w}", "what did we decide about {w}?", "how do I fix {w}", "remind me about {w}",
                      "{w} again?", "where is the {w} from last time")

FUNCTION_WORDS = sorted(STOPWORDS["en"]) + [
    "was", "have", "been", "which", "would", "could", "about", "when", "after", "before", "into", "than", "them",
    "they", "their", "these", "those", "were", "has", "had", "did", "does", "need", "want", "think", "like", "one",
    "two", "some", "more", "only", "any", "each", "other", "new", "old", "same", "again", "still", "already", "yes",
    "no", "ok", "sure", "right", "because", "while", "where", "who", "why", "first", "last", "next", "over", "out",
    "up", "down", "see", "look", "try", "done", "work", "works", "working", "thing", "way", "time", "file", "line",
]
DOMAIN_WORDS = [
    "deploy", "deployment", "config", "configuration", "error", "errors", "test", "tests", "database", "index",
    "latency", "query", "queries", "server", "client", "request", "response", "timeout", "retry", "backoff", "cache",
    "token", "tokens", "schema", "migration", "table", "column", "row", "rows", "branch", "commit", "merge", "review",
    "release", "version", "docker", "container", "image", "cluster", "node", "pod", "service", "endpoint", "route",
    "handler", "worker", "queue", "job", "schedule", "cron", "logs", "logging", "metric", "metrics", "alert",
    "dashboard", "trace", "span", "memory", "cpu", "disk", "network", "port", "host", "proxy", "gateway", "auth",
    "login", "password", "secret", "key", "certificate", "tls", "dns", "domain", "bucket", "storage", "backup",
    "restore", "snapshot", "replica", "primary", "failover", "lock", "transaction", "deadlock", "pool", "connection",
    "socket", "thread", "process", "async", "await", "function", "method", "class", "module", "package", "import",
    "dependency", "install", "build", "compile", "lint", "format", "type", "types", "interface", "struct", "field",
    "value", "default", "option", "flag", "argument", "parameter", "variable", "environment", "staging",
    "production", "local", "remote", "upstream", "downstream", "api", "json", "yaml", "toml", "csv", "parquet",
    "pipeline", "asset", "partition", "backfill", "sensor", "report", "invoice", "invoices", "order", "orders",
    "payment", "payments", "user", "users", "account", "customer", "ticket", "issue", "bug", "fix", "patch",
    "feature", "refactor", "rename", "delete", "update", "insert", "select", "join", "filter", "sort", "limit",
    "offset", "page", "pagination", "search", "vector", "embedding", "model", "prompt", "summary", "context",
    "chunk", "session", "message", "assistant", "tool", "shell", "python", "pytest", "fixture", "mock", "stub",
    "benchmark", "profile", "slow", "fast", "p95", "p99", "throughput", "load", "traffic", "spike", "outage",
    "incident", "postmortem", "rollback", "hotfix", "feature_flag", "load_settings", "config_cache", "max_retries",
    "created_at", "user_id", "status", "utc", "timezone", "calendar", "meeting", "deadline", "sprint", "roadmap",
]
SYLLABLES = ["ka", "lo", "mi", "tre", "van", "so", "ru", "pel", "dor", "an", "ki", "za", "mo", "ne", "ti", "bra",
             "gu", "fen", "hal", "qui", "sto", "ver", "lin", "ox", "ur", "cas", "del", "nor", "ip", "yu"]
TAIL_WORDS = 30_000
ROLE_MARKERS = ["\nUser:", "\nAssistant:", "\nTool result (shell):", "\nTool result (read_file):"]
_WORD = re.compile(r"\w+", re.UNICODE)


# --- results --------------------------------------------------------------------------


@dataclass(frozen=True)
class Latency:
    p50_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    n: int

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Latency:
        ms = np.asarray(seconds, dtype=float) * 1000
        p50, p95, p99 = np.percentile(ms, [50, 95, 99])
        return cls(round(float(p50), 3), round(float(p95), 3), round(float(p99), 3), round(float(ms.mean()), 3),
                   round(float(ms.max()), 3), len(ms))


@dataclass(frozen=True)
class PathLatency:
    path: str
    without_embedding: Latency  # the query vector precomputed
    with_embedding: Latency | None  # embedded inside the call; None for a path that embeds nothing


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


@dataclass(frozen=True)
class SearchBenchResult:
    database: str
    reused: bool
    build_seconds: float | None  # of the build that made the database (also when reused)
    users: int
    chunks: int
    facts: int
    queries: int
    seed: int
    embedder: str
    server_version: str
    query_embedding: Latency  # embedding one query alone
    paths: tuple[PathLatency, ...]
    recall_at_10_chunks: float  # the chunk vector query against exact search over the user's rows
    recall_at_10_facts: float | None  # None without facts
    turns: int
    turn_index: TurnIndexSize | None  # with turns: the table's and indexes' size on disk, their build time
    measure_seconds: float
    load_average: tuple[float, float]  # the machine's 1-minute load average before and after measuring


# --- the word model --------------------------------------------------------------------


def _split_words(*groups: Sequence[str]) -> list[str]:
    out: list[str] = []
    for group in groups:
        for item in group:
            out.extend(w.casefold() for w in _WORD.findall(item))
    return out


class WordModel:
    """Seeded text: a Zipf distribution over function words, developer vocabulary and a tail
    of made-up words; every user mixes in topic words of their own."""

    def __init__(self, seed: int, users: int):
        rng = np.random.default_rng([seed, 1])
        head = list(dict.fromkeys(_split_words(FUNCTION_WORDS, DOMAIN_WORDS, SERVICES, EDITORS, LANGUAGES, CITIES,
                                                                [q + " " + a for q, a in TOPICS])))
        tail: list[str] = []
        seen = set(head)
        while len(tail) < TAIL_WORDS:
            word = "".join(SYLLABLES[i] for i in rng.integers(0, len(SYLLABLES), size=int(rng.integers(2, 5))))
            if word not in seen:
                seen.add(word)
                tail.append(word)
        self.words = head + tail
        size = len(self.words)
        weights = 1.0 / (np.arange(size) + 2.7)
        self.cdf = np.cumsum(weights) / weights.sum()
        # token table: plain words, then with a full stop, then with a question mark, then role markers
        self.table = np.array(self.words + [w + "." for w in self.words] + [w + "?" for w in self.words]
                              + ROLE_MARKERS, dtype=object)
        self.size = size
        self.topics = rng.integers(len(head), size, size=(users, TOPIC_WORDS))
        self.services = [SERVICES[i] for i in rng.integers(0, len(SERVICES), size=users)]

    def tokens(self, rng: np.random.Generator, users: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Word ids for texts of `lengths` words by `users`, concatenated."""
        total = int(lengths.sum())
        ids = np.searchsorted(self.cdf, rng.random(total)).astype(np.int64)
        owner = np.repeat(users, lengths)
        topical = rng.random(total) < TOPIC_SHARE
        ids[topical] = self.topics[owner[topical], rng.integers(0, TOPIC_WORDS, size=int(topical.sum()))]
        return np.minimum(ids, self.size - 1)

    def chunk_texts(self, rng: np.random.Generator, users: np.ndarray) -> list[str]:
        lengths = rng.integers(CHUNK_WORDS[0], CHUNK_WORDS[1] + 1, size=len(users))
        ids = self.tokens(rng, users, lengths)
        punct = rng.random(len(ids))
        ids = np.where(punct < 0.08, ids + self.size, np.where(punct < 0.09, ids + 2 * self.size, ids))
        markers = rng.random(len(ids)) < 1 / 45
        ids[markers] = 3 * self.size + rng.integers(0, len(ROLE_MARKERS), size=int(markers.sum()))
        words = self.table[ids].tolist()
        texts, start = [], 0
        for length in lengths.tolist():
            texts.append("User: " + " ".join(words[start:start + length]))
            start += length
        return texts

    def phrase(self, rng: np.random.Generator, user: int, length: int) -> str:
        return " ".join(self.words[i] for i in self.tokens(rng, np.array([user]), np.array([length])).tolist())

    def turn_texts(self, rng: np.random.Generator, users: np.ndarray) -> list[str]:
        """Messages of 8 to 60 words (about 50 to 350 characters), punctuated."""
        lengths = rng.integers(TURN_WORDS[0], TURN_WORDS[1] + 1, size=len(users))
        ids = self.tokens(rng, users, lengths)
        punct = rng.random(len(ids))
        ids = np.where(punct < 0.08, ids + self.size, np.where(punct < 0.09, ids + 2 * self.size, ids))
        words = self.table[ids].tolist()
        texts, start = [], 0
        for length in lengths.tolist():
            texts.append(" ".join(words[start:start + length]))
            start += length
        return texts

    def breadcrumbs(self, rng: np.random.Generator, user: int) -> list[str]:
        count = int(rng.integers(0, 6))
        picks = [self.words[i] for i in self.topics[user, rng.integers(0, TOPIC_WORDS, size=count)].tolist()]
        crumbs = [self.services[user]] if count else []
        for n, word in enumerate(picks[1:], start=1):
            crumbs.append(f"{word}.py" if n % 2 else f"{picks[0]}_{word}")
        return crumbs


# --- embedding the load ------------------------------------------------------------------


class _WordIndex(dict):
    """Word -> row of the word-vector matrix; a word seen for the first time is hashed once."""

    def __init__(self, vectors: _HashingVectors):
        super().__init__()
        self.vectors = vectors

    def __missing__(self, word: str) -> int:
        row = self[word] = self.vectors.add(word)
        return row


class _HashingVectors:
    """The hashing embedder, fast for bulk loads: a text's vector is the sum of its words'
    vectors (each word's feature and its character 3-grams), so every distinct word is hashed
    once and a batch is one sparse product. Gives what HashingEmbedder.embed gives."""

    MAX_WORDS = 200_000  # beyond it (words cut at the 2,000th character), words are hashed every time

    def __init__(self, embedder: HashingEmbedder):
        self.embedder = embedder
        self.index = _WordIndex(self)
        self.matrix = np.zeros((4096, embedder.dimension), dtype=np.float32)
        self.size = 0

    def word_vector(self, word: str) -> np.ndarray:
        return np.asarray(self.embedder._embed_batch([word])[0], dtype=np.float32)

    def add(self, word: str) -> int:
        if self.size == self.MAX_WORDS:
            return -1
        if self.size == len(self.matrix):
            self.matrix = np.vstack([self.matrix, np.zeros_like(self.matrix)])
        self.matrix[self.size] = self.word_vector(word)
        self.size += 1
        return self.size - 1

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from scipy.sparse import csr_matrix  # scipy comes with great-expectations, a pinned dependency

        indices: list[int] = []
        indptr = [0]
        lookup = self.index.__getitem__
        for text in texts:
            indices.extend(map(lookup, _WORD.findall(unicodedata.normalize("NFKC", text).casefold())))
            indptr.append(len(indices))
        ids = np.asarray(indices, dtype=np.int64)
        unindexed = np.flatnonzero(ids < 0)
        counts = csr_matrix((np.where(ids < 0, 0, 1).astype(np.float32), np.maximum(ids, 0), indptr),
                            shape=(len(texts), self.size))
        vectors = counts @ self.matrix[:self.size]
        if len(unindexed):
            rows = np.searchsorted(np.asarray(indptr), unindexed, side="right") - 1
            words = [w for text in texts for w in _WORD.findall(unicodedata.normalize("NFKC", text).casefold())]
            for row, position in zip(rows.tolist(), unindexed.tolist()):
                vectors[row] += self.word_vector(words[position])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def bulk_embedder(embedder: Embedder) -> Callable[[Sequence[str]], np.ndarray]:
    if isinstance(embedder, HashingEmbedder):
        return _HashingVectors(embedder).embed
    return lambda texts: np.asarray(embedder.embed(list(texts)), dtype=np.float32)


# --- building the database --------------------------------------------------------------


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


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
        with conn.transaction(), conn.cursor().copy(query("bench_copy_chunks")) as copy:
            copy.set_types(["text", "text", "int8", "int8", "timestamptz", "timestamptz", "text", "text", "text[]",
                            "int4", "text", "text", "text", "text", "vector", "text"])
            for row in rows:
                copy.write_row(row)
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
        with conn.transaction(), conn.cursor().copy(query("bench_copy_facts")) as copy:
            copy.set_types(["text", "text", "text", "text", "text", "text", "int2", "timestamptz", "text", "int8",
                            "int8", "text", "text", "text", "text", "vector", "text"])
            for (user, category, key, value, seen, confidence), vector in zip(rows, vectors):
                copy.write_row((f"bench-user-{user + 1:05d}", category, key, key, value, "conversation",
                                confidence, seen, f"bench-{user + 1:05d}-00001", 1, 2,
                                seen.date().isoformat(), "bench", "bench", "bench", vector, model_id))
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
            conn.execute(query("bench_create_turn_load"))
            with conn.cursor().copy(query("bench_copy_turn_load")) as copy:
                copy.set_types(["text", "int8", "text", "int4", "text", "timestamptz", "text", "vector", "text"])
                for row in rows:
                    copy.write_row(row)
            conn.execute(query("bench_insert_turns"))
        loaded += len(rows)
        if number % 40 == 0 or loaded == config.turns:
            progress(f"turns: {loaded:,} / {config.turns:,}")
    conn.execute(query("bench_turn_stats"))


def build(url: str, config: SearchBenchConfig, embedder: Embedder,
          progress: Callable[[str], None] = lambda _: None) -> tuple[float, TurnIndexSize | None]:
    """Fill the (migrated, empty) benchmark database; returns the seconds it took and, with
    turns, what their index costs."""
    began = time.perf_counter()
    model = WordModel(config.seed, config.users)
    embed = bulk_embedder(embedder)
    with psycopg.connect(url, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute("SET synchronous_commit = off")  # an interrupted build is rebuilt anyway
        saved = {}
        for table in ("memory_chunks", "memory_facts", "memory_turns"):
            saved[table] = conn.execute(query("bench_secondary_indexes"), {"table": table}).fetchall()
            for name, _ in saved[table]:
                conn.execute(sql.SQL(query("drop_index")).format(index=sql.Identifier(name)))
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
            conn.execute(sql.SQL(query("bench_vacuum_analyze")).format(table=sql.Identifier(table)))
            if table == "memory_turns":
                index_seconds = time.perf_counter() - started
        size = None
        if config.turns:
            table_bytes, index_bytes = conn.execute(query("bench_turn_sizes")).fetchone()
            size = TurnIndexSize(table_bytes, index_bytes, round(loaded - turns_began, 1), round(index_seconds, 1))
    return time.perf_counter() - began, size


def prepare_database(admin_url: str, config: SearchBenchConfig, embedder: Embedder, *, rebuild: bool = False,
                     progress: Callable[[str], None] = lambda _: None) -> tuple[str, bool, float | None,
                                                                                   TurnIndexSize | None]:
    """The benchmark database's URL, whether it was reused, and its build time. Only ever
    creates or drops the database named for `config`, never the one `admin_url` names."""
    name = config.database
    if not name.startswith(DATABASE_PREFIX + "_") or urlsplit(admin_url).path.lstrip("/") == name:
        raise ValueError(f"refusing to use {name!r} as the benchmark database")
    url = with_database(admin_url, name)
    params = _params(config, embedder)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        exists = admin.execute(query("bench_database_exists"), {"name": name}).fetchone()[0]
    if exists and not rebuild:
        with psycopg.connect(url) as conn:
            conn.execute(query("bench_meta_create"))
            conn.execute(query("bench_meta_turn_columns"))
            meta = conn.execute(query("bench_meta_read")).fetchone()
        if meta and meta[0] == params and meta[1]:
            try:
                migrate(url)  # a newer schema applies to the data already there
                return url, True, meta[2], _turn_size(url, config)
            except MigrationError as exc:
                progress(f"{name} cannot be migrated ({exc}): rebuilding")
        else:
            progress(f"{name} was built from other parameters or not finished: rebuilding")
    with psycopg.connect(admin_url, autocommit=True) as admin:
        if exists:
            admin.execute(sql.SQL(query("bench_drop_database")).format(database=sql.Identifier(name)))
        admin.execute(sql.SQL(query("bench_create_database")).format(database=sql.Identifier(name)))
    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(query("bench_meta_create"))
        conn.execute(query("bench_meta_turn_columns"))
        conn.execute(query("bench_meta_start"), {"params": Jsonb(params)})
    progress(f"building {name}: {config.chunks:,} chunks, {config.facts:,} facts, {config.turns:,} turns, "
             f"{config.users:,} users")
    seconds, size = build(url, config, embedder, progress)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(query("bench_meta_complete"), {"seconds": seconds})
        if size is not None:
            conn.execute(query("bench_meta_turn_build"), {"load": size.load_seconds, "index": size.index_seconds})
    progress(f"built in {seconds:.0f}s")
    return url, False, seconds, size


def _turn_size(url: str, config: SearchBenchConfig) -> TurnIndexSize | None:
    """A reused database's turn index: its size now, its build times as recorded."""
    if not config.turns:
        return None
    with psycopg.connect(url) as conn:
        table_bytes, index_bytes = conn.execute(query("bench_turn_sizes")).fetchone()
        load, index = conn.execute(query("bench_meta_turn_build_read")).fetchone()
    return TurnIndexSize(table_bytes, index_bytes, load or 0.0, index or 0.0)


# --- queries and measurement --------------------------------------------------------------


@dataclass(frozen=True)
class BenchQuery:
    user_id: str
    text: str
    source: str  # chunk | fact (a turn of the turn-level load counts as a chunk)


def draw_queries(conn: psycopg.Connection, count: int, seed: int, turns: bool = False) -> list[BenchQuery]:
    """A user and 2-4 content words of one of their chunks (three in four; turns, with the
    turn-level load) or facts, in a question template; seeded, drawn from the data."""
    rng = np.random.default_rng([seed, 5])
    from_facts = rng.random(count) < 0.25
    picked: dict[str, list] = {}
    texts = ("memory_turns", "bench_turns_by_id") if turns else ("memory_chunks", "bench_chunks_by_id")
    for table, name, n in ((*texts, int((~from_facts).sum())),
                           ("memory_facts", "bench_facts_by_id", int(from_facts.sum()))):
        low, high = conn.execute(sql.SQL(query("bench_id_range")).format(table=sql.Identifier(table))).fetchone()
        if n == 0 or high == 0:
            picked[table] = []
            continue
        ids = sorted(set(rng.integers(low, high + 1, size=n * 2).tolist()))
        rows = conn.execute(query(name), {"ids": ids}).fetchall()
        order = rng.permutation(len(rows))
        picked[table] = [rows[i] for i in order[:n]]
    chunks, facts = iter(picked[texts[0]]), iter(picked["memory_facts"])
    out = []
    for fact in from_facts.tolist():
        row = next(facts, None) if fact else None
        if row is None:
            row, fact = next(chunks, None), False
            if row is None:
                row, fact = next(facts, None), True
        if row is None:
            break
        text = f"{row[2].replace('_', ' ')} {row[3]}" if fact else row[2]
        words = sorted(content_words(text))
        if not words:
            continue
        chosen = [words[i] for i in rng.choice(len(words), size=min(len(words), int(rng.integers(2, 5))),
                                               replace=False)]
        template = QUESTION_TEMPLATES[int(rng.integers(0, len(QUESTION_TEMPLATES)))]
        out.append(BenchQuery(row[1], template.format(w=" ".join(chosen)), "fact" if fact else "chunk"))
    return out


class PrecomputedEmbedder(Embedder):
    """Answers from vectors computed up front: searches timed without the embedding."""

    def __init__(self, inner: Embedder, vectors: dict[str, list[float]]):
        super().__init__(inner.config)
        self._dimension = inner.dimension
        self.inner, self.vectors = inner, vectors

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    def embed(self, texts):
        return [self.vectors[t] for t in texts]

    def _embed_batch(self, texts):
        return [self.vectors[t] for t in texts]


PATHS: tuple[tuple[str, bool, Callable[[UnifiedMemorySearch, BenchQuery], object]], ...] = (
    ("search_facts", True, lambda s, q: s.search_facts(q.text, q.user_id)),
    ("search_chunks hybrid", True, lambda s, q: s.search_chunks(q.text, q.user_id, mode="hybrid")),
    ("search_chunks vector", True, lambda s, q: s.search_chunks(q.text, q.user_id, mode="vector")),
    ("search_chunks text", False, lambda s, q: s.search_chunks(q.text, q.user_id, mode="text")),
    ("unified search", True, lambda s, q: s.search(q.text, user_id=q.user_id)),
)
# with the turn-level load: passages alone, and unified search within its default budget
TURN_PATHS: tuple[tuple[str, bool, Callable[[UnifiedMemorySearch, BenchQuery], object]], ...] = (
    ("search_facts", True, lambda s, q: s.search_facts(q.text, q.user_id)),
    ("passages fused", True, lambda s, q: s.search_passages(q.text, q.user_id)),
    ("passages text (BM25)", False, lambda s, q: s.search_passages(q.text, q.user_id, how=TurnSearch(signal="text"))),
    ("passages vector", True, lambda s, q: s.search_passages(q.text, q.user_id, how=TurnSearch(signal="vector"))),
    ("unified search, 6,000-character budget", True, lambda s, q: s.search(q.text, user_id=q.user_id)),
)


def _time_pass(conn: psycopg.Connection, embedder: Embedder, call, queries: Sequence[BenchQuery]) -> list[float]:
    seconds = []
    for q in queries:
        search = UnifiedMemorySearch(conn, embedder)  # one per request, as the CLI and the tools make it
        conn.rollback()
        began = time.perf_counter()
        call(search, q)
        seconds.append(time.perf_counter() - began)
        conn.rollback()  # unified search counts accesses: the data stays as built
    return seconds


def _recall(conn: psycopg.Connection, queries: Sequence[BenchQuery], vectors: dict[str, list[float]], model: str,
            vector_query: str, exact_query: str, scope_extra: dict) -> float | None:
    scores = []
    for q in queries:
        vector = np.asarray(vectors[q.text], dtype=np.float32)
        got = [r[0] for r in conn.execute(query(vector_query), {
            "vector": vector, "model": model, "user_id": q.user_id, "all_users": False, "limit": RECALL_K,
            **scope_extra})]
        rows = conn.execute(query(exact_query), {"user_id": q.user_id, "model": model}).fetchall()
        if not rows:
            continue
        ids = np.array([r[0] for r in rows])
        matrix = np.stack([r[1].to_numpy() for r in rows]).astype(np.float64)
        distance = 1 - (matrix @ vector) / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(vector))
        order = np.lexsort((ids, distance))[:RECALL_K]
        cutoff = distance[order[-1]] + 1e-6  # ties at the 10th distance count as found
        exact = {int(i): float(d) for i, d in zip(ids, distance)}
        scores.append(sum(1 for i in got if exact.get(i, np.inf) <= cutoff) / len(order))
    conn.rollback()
    return round(float(np.mean(scores)), 4) if scores else None


def measure(url: str, embedder: Embedder, config: SearchBenchConfig,
            progress: Callable[[str], None] = lambda _: None) -> tuple[Latency, tuple[PathLatency, ...], float,
                                                                      float | None]:
    paths = TURN_PATHS if config.turns else PATHS
    with psycopg.connect(url) as conn:
        register_vector(conn)
        queries = draw_queries(conn, config.queries + config.warmup, config.seed, turns=bool(config.turns))
        conn.rollback()
        warmup, queries = queries[:config.warmup], queries[config.warmup:]
        embed_seconds, vectors = [], {}
        for q in warmup + queries:
            began = time.perf_counter()
            vectors[q.text] = embedder.embed([q.text])[0]
            embed_seconds.append(time.perf_counter() - began)
        cached = PrecomputedEmbedder(embedder, vectors)
        for _, _, call in paths:  # statements prepared, caches warm
            _time_pass(conn, cached, call, warmup)
        results = []
        for name, embeds, call in paths:
            without = Latency.of(_time_pass(conn, cached, call, queries))
            with_ = Latency.of(_time_pass(conn, embedder, call, queries)) if embeds else None
            results.append(PathLatency(name, without, with_))
            progress(f"{name}: p95 {without.p95_ms:.1f} ms" + (f", {with_.p95_ms:.1f} ms with the embedding"
                                                                if with_ else ""))
        chunk_recall = 0.0 if config.turns else _recall(  # turn vectors are searched exactly: recall 1 by design
            conn, queries, vectors, embedder.model_id, "chunk_search", "bench_user_chunk_vectors",
            {"session_id": None, "match": "", "rank": "", "vector_limit": RECALL_K, "text_limit": 0})
        fact_recall = _recall(conn, queries, vectors, embedder.model_id, "fact_vector_search",
                              "bench_user_fact_vectors", {})
        return Latency.of(embed_seconds[len(warmup):]), tuple(results), chunk_recall or 0.0, fact_recall


def run(admin_url: str, config: SearchBenchConfig, embedder: Embedder, *, rebuild: bool = False,
        progress: Callable[[str], None] = lambda _: None) -> SearchBenchResult:
    """Build (or reuse) the benchmark database on the server `admin_url` points at, then measure."""
    url, reused, build_seconds, turn_index = prepare_database(admin_url, config, embedder, rebuild=rebuild,
                                                              progress=progress)
    load_before = load_average()
    began = time.perf_counter()
    embedding, paths, chunk_recall, fact_recall = measure(url, embedder, config, progress)
    with psycopg.connect(url) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
    return SearchBenchResult(config.database, reused, round(build_seconds, 1) if build_seconds else None,
                             config.users, config.chunks, config.facts, config.queries, config.seed,
                             embedder.model_id, version, embedding, paths, chunk_recall, fact_recall, config.turns,
                             turn_index, round(time.perf_counter() - began, 1), (load_before, load_average()))


def load_average() -> float:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return -1.0


def markdown(result: SearchBenchResult) -> str:
    built = ("reused" if result.reused else "built") + (f", build {result.build_seconds:.0f}s"
                                                         if result.build_seconds else "")
    turns = f"{result.turns:,} turns, " if result.turns else ""
    lines = [f"search latency: {turns}{result.chunks:,} chunks, {result.facts:,} facts, {result.users:,} users, "
             f"{result.queries} queries (seed {result.seed}), embedder {result.embedder}, "
             f"PostgreSQL {result.server_version} ({result.database}, {built})", "",
             "| path | p50 ms | p95 ms | p99 ms | p50 ms +embed | p95 ms +embed | p99 ms +embed |",
             "|---|---|---|---|---|---|---|"]
    for p in result.paths:
        w = p.with_embedding
        tail = f"{w.p50_ms:.2f} | {w.p95_ms:.2f} | {w.p99_ms:.2f}" if w else "– | – | –"
        lines.append(f"| {p.path} | {p.without_embedding.p50_ms:.2f} | {p.without_embedding.p95_ms:.2f} | "
                     f"{p.without_embedding.p99_ms:.2f} | {tail} |")
    e = result.query_embedding
    if result.turn_index is not None:
        t = result.turn_index
        lines += ["", f"turn index: table {t.table_bytes / 2**30:.2f} GiB, indexes {t.index_bytes / 2**30:.2f} GiB on "
                      f"disk; loaded and indexed in {t.load_seconds:.0f}s, secondary indexes built in "
                      f"{t.index_seconds:.0f}s"]
    lines += ["", f"query embedding alone: p50 {e.p50_ms:.2f} ms, p95 {e.p95_ms:.2f} ms, p99 {e.p99_ms:.2f} ms",
              f"recall@{RECALL_K} of the vector queries against exact search: "
              + ("turns 1 (searched exactly)" if result.turns else f"chunks {result.recall_at_10_chunks:.3f}")
              + (f", facts {result.recall_at_10_facts:.3f}" if result.recall_at_10_facts is not None else ""),
              f"measured in {result.measure_seconds:.0f}s, load average {result.load_average[0]:.2f} before, "
              f"{result.load_average[1]:.2f} after, on {os.cpu_count()} cores"]
    return "\n".join(lines)


def to_json(result: SearchBenchResult) -> str:
    from dataclasses import asdict

    return json.dumps(asdict(result), indent=2)

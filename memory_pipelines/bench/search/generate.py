"""The benchmark's synthetic text: a seeded word model over function words, developer
vocabulary and made-up words (each user with topic words of their own), and the bulk hashing
embedder that embeds what it writes."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

import numpy as np

from memory_pipelines.embed import Embedder, HashingEmbedder
from memory_pipelines.generator import CITIES, EDITORS, LANGUAGES, SERVICES, TOPICS
from memory_pipelines.rules.text import STOPWORDS

CHUNK_WORDS = (40, 600)  # words per chunk, uniform: about 2,200 characters on average (the packer's cap is 4,000)
TURN_WORDS = (8, 60)
TOPIC_WORDS = 40  # a user's own words
TOPIC_SHARE = 0.15  # of a chunk's words

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

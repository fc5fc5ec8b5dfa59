"""Issue 36: a database server that dies under a command is one line, not a stack trace. A
backend of a real embedded server is killed by SIGILL in the middle of a search (as pgvector's
AVX-512 code did on CPUs without it) or of a pipeline step: the CLI prints one line naming
the signal, the log and what to do; the HTTP API answers 503 with Retry-After; MCP a tool
error with the same words; a step fails naming its days and the cause, and what it had not
committed is not there. After each crash the server recovers and the same request answers."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import psycopg
import pytest
from pgserver._commands import POSTGRES_BIN_PATH

from memory_pipelines.db import embedded
from tests.conftest import SAMPLE_DB
from assets.embeddings import memory_embeddings
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from tests.helpers import ENTRY, content_fingerprints, free_port, materialize_partitions, start_server, with_database
from tests.integration.test_api_http import create_keys
from tests.integration.test_api_mcp import stdio_session

pytestmark = pytest.mark.slow

# What the postmaster logs when a backend dies as pgvector's AVX-512 code died on an AVX2 CPU.
SIGILL_LINE = "signal 4: Illegal instruction"
# A function replaced by one that kills the backend running it with SIGILL (the shell's parent
# is the backend), then restored from pgvector's library.
KILLER = """CREATE OR REPLACE FUNCTION {signature} RETURNS {result} LANGUAGE plpgsql AS $$
BEGIN COPY (SELECT 1) TO PROGRAM 'kill -ILL $PPID'; RETURN NULL; END $$"""
RESTORE = "CREATE OR REPLACE FUNCTION {signature} RETURNS {result} AS '$libdir/vector', '{symbol}' " \
          "LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE"
DISTANCE = {"signature": "cosine_distance(halfvec, halfvec)", "result": "double precision",
            "symbol": "halfvec_cosine_distance"}
ORDERING = {"signature": "halfvec_cmp(halfvec, halfvec)", "result": "integer", "symbol": "halfvec_cmp"}


@pytest.fixture(scope="module")
def crashing(pg_admin_url, sample_template):
    """An embedded server of its own (a crash resets every connection of a server) holding the
    distilled sample, with autovacuum off (its ANALYZE would call a killed comparison): its
    home, URL, the CLI's environment and API keys made on it."""
    home = Path(tempfile.mkdtemp(prefix="mp-crash-"))
    url = embedded.start(home)
    dump = subprocess.run([str(POSTGRES_BIN_PATH / "pg_dump"), "-Fc", "-d", with_database(pg_admin_url, SAMPLE_DB)],
                          capture_output=True, check=True).stdout
    subprocess.run([str(POSTGRES_BIN_PATH / "pg_restore"), "--no-owner", "-d", url], input=dump, check=True)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET autovacuum = off")
        conn.execute("SELECT pg_reload_conf()")
        conn.execute("ANALYZE")
    env = {**os.environ, "MEMORY_HOME": str(home), "DAGSTER_HOME": str(home / "dagster"),
           "MEMORY_EMBED_BACKEND": "hashing", "MEMORY_RETRY_MAX": "0"}
    for name in ("MEMORY_DATABASE_URL", "MEMORY_TRANSCRIPTS"):
        env.pop(name, None)
    yield home, url, env, create_keys(env)
    embedded.stop(home)
    shutil.rmtree(home, ignore_errors=True)


@contextmanager
def killed(url: str, function: dict):
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(KILLER.format(**function))
    try:
        yield
    finally:
        for _ in range(150):  # up to 30 s for the crashed server to recover
            try:
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(RESTORE.format(**function))
                break
            except psycopg.OperationalError:
                time.sleep(0.2)


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ENTRY), *args], env=env, capture_output=True, text=True, timeout=300)


def test_a_search_whose_server_process_dies_is_one_line_naming_the_signal_and_the_log(crashing):
    home, url, env, _ = crashing
    with killed(url, DISTANCE):
        done = cli(env, "search", "ledger-api port", "--user", "bob")
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("memory-pipelines: error: the database server stopped while searching "
                                  f"({SIGILL_LINE}; `memory-pipelines doctor` checks"), done.stderr
    assert done.stderr.rstrip().endswith(f"see {embedded.log_path(home)}; run the command again"), done.stderr
    again = cli(env, "search", "ledger-api port", "--user", "bob")  # as the line says
    assert again.returncode == 0 and "9090" in again.stdout, again.stderr


def test_the_http_api_answers_503_with_retry_after_then_serves_again(crashing, tmp_path):
    home, url, env, keys = crashing
    server = start_server(["http", "--port", str(free_port())], env, tmp_path / "server.log")
    try:
        with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {keys['bob']}"},
                          timeout=60) as client:
            assert client.get("/v1/search", params={"q": "ledger-api port"}).status_code == 200
            with killed(url, DISTANCE):
                lost = client.get("/v1/search", params={"q": "ledger-api port"})
            served = client.get("/v1/search", params={"q": "ledger-api port"})
    finally:
        server.stop()
    assert lost.status_code == 503 and lost.headers["Retry-After"] == "5", lost.text
    error = lost.json()["error"]
    assert error["code"] == "database_unavailable"
    assert error["message"].startswith(f"the database server stopped while answering /v1/search ({SIGILL_LINE};")
    assert error["message"].endswith("; try again in 5 s")
    assert served.status_code == 200 and "9090" in served.json()["text"]


def test_mcp_memory_search_is_a_tool_error_with_the_same_words_then_answers_again(crashing):
    home, url, env, keys = crashing

    async def calls():
        async with stdio_session(env, keys["bob"]) as session:
            with killed(url, DISTANCE):
                lost = await session.call_tool("memory_search", {"query": "ledger-api port"})
            return lost, await session.call_tool("memory_search", {"query": "ledger-api port"})

    lost, served = anyio.run(calls)
    assert lost.is_error
    # (the SDK puts "Error executing tool memory_search: " before a tool's error)
    assert lost.content[0].text.endswith(f"database_unavailable: the database server stopped while answering a tool "
                                         f"call ({SIGILL_LINE}; `memory-pipelines doctor` checks what this CPU runs); "
                                         f"see {embedded.log_path(home)}; try again in 5 s"), lost.content[0].text
    assert not served.is_error and "9090" in served.content[0].text


def test_a_step_whose_server_process_dies_fails_naming_its_days_and_writes_nothing_half(crashing):
    home, url, env, _ = crashing
    with psycopg.connect(url, autocommit=True) as conn:
        emptied = conn.execute("UPDATE memory_turns SET embedding = NULL, embedding_model = NULL "
                               "WHERE partition_key = '2026-10-03'").rowcount
    before = content_fingerprints(url)
    assert emptied > 0
    with killed(url, ORDERING):  # the embedding load's ANALYZE orders the page's halfvecs
        done = cli(env, "run", "--start", "2026-10-03", "--end", "2026-10-03")
    assert done.returncode == 1
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("memory-pipelines: error: partition 2026-10-03 failed at memory_embeddings: the database "
                            "server stopped while materializing memory_embeddings for 2026-10-03 "
                            f"({SIGILL_LINE};"), done.stderr
    assert error.endswith("the step is retried; run these days again if it fails"), error
    # the stages before it re-ran idempotently; the page being embedded rolled back whole
    assert content_fingerprints(url) == before
    # run again, the step alone: it finishes what the crash rolled back
    materialize_partitions([memory_embeddings], ["2026-10-03"], url, SAMPLE_TRANSCRIPTS)
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM memory_turns WHERE embedding IS NULL").fetchone()[0] == 0

"""Shared test helpers (no fixtures here: see conftest.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import dagster as dg
import httpx
import numpy as np
import psycopg
from memory_pipelines.db.vectors import register_vector_types
from psycopg import sql

from assets.resources import EmbedderResource, LifecycleSettings, MemorySettings, ModelResource, PostgresResource, SummarySettings, TranscriptSourceResource
from memory_pipelines.db.connection import with_database  # noqa: F401 (tests import it from here)
from memory_pipelines.ports import free_port  # noqa: F401 (tests import it from here)
from memory_pipelines.records import TranscriptScan
from memory_pipelines.sources import SourceSettings, open_source
from memory_pipelines.sources.files import MemoryIndex
from memory_pipelines.core.transcript_scan import day_of


ENTRY = Path(sys.executable).parent / "memory-pipelines"




# Dagster's console logger at WARNING: a failing test shows what matters, not every event.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}

AUDIT_COLUMNS = frozenset({"run_id", "ingested_run_id", "ingested_at", "created_at", "updated_at",
                           "quarantined_at", "archived_at", "id", "call_id"})
# what is no memory: the migration ledger, and the index of transcript files (a cache of
# file scans: copies of the same files differ in modification time)
NOT_MEMORY = ("schema_migrations", "transcript_objects")
# what the embedder tests embed: a question, a statement, a line of code talk, a one-word reply
EMBEDDER_SENTENCES = (
    "how do I change the port my web server listens on?",
    "switch ledger-api to port 9090 from now on",
    "pandas reads the decimal comma as text",
    "ok",
)
# jsonb copies of whole rows (memory_archive.row_data): compared without the skipped columns' keys.
ROW_COPY_COLUMNS = frozenset({"row_data"})


def _columns(conn: psycopg.Connection, table: str, skip: frozenset) -> list[str]:
    return [r[0] for r in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
        "AND table_name = %s ORDER BY ordinal_position", (table,)) if r[0] not in skip]


def table_fingerprints(url: str, tables: Iterable[str] | None = None, *, skip_columns: frozenset = frozenset(),
                       skip_tables: tuple[str, ...] = NOT_MEMORY) -> dict[str, tuple[int, str]]:
    """Row count and an md5 over every row of each table (all public tables by default),
    in a stable order."""
    with psycopg.connect(url) as conn:
        if tables is None:
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                "AND table_type = 'BASE TABLE' AND NOT table_name = ANY(%s) ORDER BY 1", (list(skip_tables),))]
        out = {}
        for table in tables:
            columns = _columns(conn, table, skip_columns)
            row_text = sql.SQL("concat_ws('|', {})").format(sql.SQL(", ").join(
                sql.SQL("({} - {}::text[])::text").format(sql.Identifier(c), sql.Literal(sorted(skip_columns)))
                if c in ROW_COPY_COLUMNS else sql.SQL("{}::text").format(sql.Identifier(c)) for c in columns))
            row = conn.execute(sql.SQL(
                "SELECT count(*), coalesce(md5(string_agg(r, E'\\n' ORDER BY r)), '') FROM (SELECT {} AS r FROM {}) x"
            ).format(row_text, sql.Identifier(table))).fetchone()
            out[table] = (row[0], row[1])
        return out


def content_fingerprints(url: str, tables: Iterable[str] | None = None) -> dict[str, tuple[int, str]]:
    """table_fingerprints without the audit columns that name a run or a moment (run ids,
    write times, serial ids), also inside archived row copies, and without the llm_calls
    ledger: two runs that built the same content compare equal."""
    return table_fingerprints(url, tables, skip_columns=AUDIT_COLUMNS, skip_tables=(*NOT_MEMORY, "llm_calls"))


# Decay that may take old, unaccessed memory after one day instead of 90: the two weeks of
# the sample then have rows for decay, its check and restores to work on.
EAGER_DECAY = LifecycleSettings(decay_min_age_days=1)


def pipeline_resources(url: str, transcripts: Path, *, llm: ModelResource | None = None,
                       decision: ModelResource | None = None, chunk_chars: int | None = None,
                       lifecycle: LifecycleSettings | None = None, **source) -> dict:
    settings = SummarySettings() if chunk_chars is None else SummarySettings(chunk_chars=chunk_chars)
    return {
        "postgres": PostgresResource(database_url=url),
        "transcript_source": TranscriptSourceResource(location=str(transcripts), **source),
        "llm": llm or ModelResource(),
        "decision": decision or ModelResource(),
        "summary_settings": settings,
        "memory_settings": MemorySettings(),
        "embedder": EmbedderResource(),
        "lifecycle": lifecycle or LifecycleSettings(),
    }


def materialize_partitions(assets, keys: Iterable[str], url: str, transcripts: Path,
                           instance: dg.DagsterInstance | None = None, *, expect_success: bool = True,
                           resources: dict | None = None, **source) -> list[dg.ExecuteInProcessResult]:
    """Materialize `assets` one partition at a time, in order (as the CLI does)."""
    instance = instance or dg.DagsterInstance.ephemeral()
    resources = resources or pipeline_resources(url, transcripts, **source)
    results = []
    for key in keys:
        result = dg.materialize(assets, partition_key=key, resources=resources, instance=instance,
                                raise_on_error=expect_success, run_config=QUIET)
        if expect_success:
            assert result.success, key
        results.append(result)
    return results


def materialize_range(assets, first: str, last: str, resources: dict,
                      instance: dg.DagsterInstance | None = None, raise_on_error: bool = True):
    """One run over a range of partitions, as a UI backfill with a single-run policy does."""
    return dg.materialize(
        assets, resources=resources, instance=instance or dg.DagsterInstance.ephemeral(),
        tags={"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last},
        raise_on_error=raise_on_error, run_config=QUIET,
    )


def materialization_metadata(result: dg.ExecuteInProcessResult, asset_key: str) -> dict:
    [mat] = result.asset_materializations_for_node(asset_key)
    return {k: v.value for k, v in mat.metadata.items()}


# Rows a stage writes in one transaction, as pairs that must never be seen apart: a run
# stopped at any moment (killed, a model or database failure) leaves none of these.
PARTIAL_WRITES = {
    "summary without its current version": """
        SELECT s.session_id FROM session_summaries s WHERE s.version IS NOT NULL AND (NOT EXISTS (
            SELECT 1 FROM session_summary_versions v WHERE v.session_id = s.session_id AND v.version = s.version
            AND v.cursor_seq = s.cursor_seq AND v.cursor_ts = s.cursor_ts AND v.summary = s.summary)
          OR s.version <> (SELECT max(v.version) FROM session_summary_versions v WHERE v.session_id = s.session_id))""",
    "summary versions without a summary": """
        SELECT DISTINCT v.session_id FROM session_summary_versions v
        WHERE NOT EXISTS (SELECT 1 FROM session_summaries s WHERE s.session_id = v.session_id)""",
    "summarized chunk without its model call": """
        SELECT v.session_id, v.version FROM session_summary_versions v WHERE v.kind = 'chunk' AND NOT EXISTS (
            SELECT 1 FROM llm_calls c WHERE c.call_id = v.call_id AND c.purpose = 'distill' AND c.status = 'ok')""",
    "fact without the call that wrote it": """
        SELECT f.id FROM memory_facts f WHERE f.call_id IS NOT NULL AND NOT EXISTS (
            SELECT 1 FROM llm_calls c WHERE c.call_id = f.call_id AND c.status = 'ok')""",
    "facts of a session not marked extracted": """
        SELECT DISTINCT f.session_id FROM memory_facts f
        WHERE NOT EXISTS (SELECT 1 FROM session_memory_state m WHERE m.session_id = f.session_id)""",
    "session extracted with facts, none stored": """
        SELECT m.session_id FROM session_memory_state m WHERE m.facts_accepted > 0
        AND NOT EXISTS (SELECT 1 FROM memory_facts f WHERE f.user_id = m.user_id)
        AND NOT EXISTS (SELECT 1 FROM memory_archive a WHERE a.user_id = m.user_id AND a.source_table = 'memory_facts')""",
    "session-day judged by two different judgements": """
        SELECT session_id, partition_key FROM conversation_segments GROUP BY 1, 2
        HAVING count(DISTINCT fingerprint) > 1""",
    "overlapping chunks": """
        SELECT a.session_id, a.start_seq, b.start_seq FROM memory_chunks a JOIN memory_chunks b
        ON a.session_id = b.session_id AND a.id < b.id AND a.start_seq <= b.end_seq AND b.start_seq <= a.end_seq""",
    "session counts out of step with messages": """
        SELECT coalesce(s.session_id, m.session_id) FROM sessions s
        FULL JOIN (SELECT session_id, count(*) AS n FROM messages GROUP BY 1) m ON m.session_id = s.session_id
        WHERE m.n IS DISTINCT FROM s.message_count""",
    "knowledge entry version without its synthesis record": """
        SELECT DISTINCT v.session_id, v.partition_key FROM knowledge_entry_versions v WHERE NOT EXISTS (
            SELECT 1 FROM knowledge_sources k WHERE k.session_id = v.session_id AND k.partition_key = v.partition_key)""",
    **{f"{table} embedding without its model": f"SELECT id FROM {table} WHERE (embedding IS NULL) <> (embedding_model IS NULL)"
       for table in ("memory_facts", "memory_chunks", "knowledge_entries")},
}


def partial_writes(url: str) -> dict[str, list[tuple]]:
    """What PARTIAL_WRITES finds in the database at `url` (empty when nothing is half-written)."""
    with psycopg.connect(url) as conn:
        found = {name: conn.execute(statement).fetchall() for name, statement in PARTIAL_WRITES.items()}
    return {name: rows for name, rows in found.items() if rows}


# The bundled sample's days (what the sample template in conftest.py is distilled over).
SAMPLE_DAYS = [f"2026-10-{day:02}" for day in range(1, 15)]


@dataclass
class Server:
    """A `memory-pipelines serve …` process on 127.0.0.1, its output in `log`."""
    proc: subprocess.Popen
    url: str
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> bool:
        """SIGTERM, as a service manager stops it; whether it ended by itself in time
        (uvicorn raises the signal it handled again after a clean shutdown: status 143)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return False
        return self.proc.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM)


def start_server(args: Sequence[str], env: dict, log: Path, *, ready: str = "/healthz",
                 seconds: float = 120) -> Server:
    """Start `memory-pipelines serve <args>` (with --port among them) and wait until it
    answers `ready` (any status: MCP refuses a request without a key with 401)."""
    port = args[list(args).index("--port") + 1]
    with log.open("w") as out:
        proc = subprocess.Popen([str(ENTRY), "serve", *args], env=env, stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited {proc.returncode}: {server.output()[-2000:]}")
        try:
            httpx.get(server.url + ready, timeout=2)
            return server
        except httpx.TransportError:
            time.sleep(0.2)
    server.stop()
    raise AssertionError(f"the server did not answer in {seconds} s: {server.output()[-2000:]}")


def scan_location(location, window, *, include_undated: bool = False, max_bytes: int | None = None,
                  **settings) -> TranscriptScan:
    """Every record a location attributes to `window`, as one scan (read day by day, with an
    index of its own, as a run reads them)."""
    if max_bytes is not None:
        settings["max_message_bytes"] = max_bytes
    plan = open_source(SourceSettings(location=str(location), **settings), MemoryIndex()).plan(
        window, include_undated=include_undated)
    scans = [scan for w in plan.windows for scan in plan.read(w)]
    return TranscriptScan(window, tuple(m for s in scans for m in s.messages),
                          tuple(q for s in scans for q in s.quarantined), plan.listed, plan.skipped)


def location_days(location, **settings) -> list[date]:
    """The UTC days a file location's records are attributed to."""
    catalog = open_source(SourceSettings(location=str(location), **settings), MemoryIndex()).catalog()
    days = {d for obj in catalog.listing.objects for d in catalog.days_of(obj)}
    return [day_of(d) for d in sorted(days)]


def sensor_context(database_url: str, cursor: str | None = None, location: Path | None = None):
    """A built sensor context with the `postgres` resource the transcript sensor keeps its
    index in, watching `location` (None: the source the environment's settings name)."""
    import dagster as dg

    from assets.resources import PostgresResource, TranscriptSourceResource
    from memory_pipelines.config import load

    source = TranscriptSourceResource.from_settings(SourceSettings.from_settings(load())) if location is None \
        else TranscriptSourceResource(location=str(location))
    return dg.build_sensor_context(cursor=cursor, resources={
        "postgres": PostgresResource(database_url=database_url), "transcript_source": source})


# Columns that hold another row's serial id: two builds name the same row by different ids.
ID_REFERENCES = {"memory_facts": ("merged_into", "concat_ws('|', t.user_id, t.category, t.key, t.value)"),
                 "entity_graph": ("closed_by", "concat_ws('|', t.user_id, t.subject, t.relation, t.object)")}
EMBEDDED = ("memory_facts", "memory_chunks", "knowledge_entries", "memory_turns")
# a stored embedding is a halfvec (migration 0025): 11 bits of mantissa, under 1e-3 for a unit vector's parts
HALFVEC_ATOL = 1e-3


def memory_differences(url_a: str, url_b: str) -> list[str]:
    """Where two builds of memory differ in content or lineage (ids, run ids, write times
    aside; a reference to another row compared by what that row holds; vectors within float
    rounding: the same text embedded in another batch differs in the last digits). The
    shard layout is configuration, not memory."""
    skip = AUDIT_COLUMNS | {"embedding", *(column for column, _ in ID_REFERENCES.values())}
    tables = (*NOT_MEMORY, "llm_calls", "shard_layout")
    a, b = (table_fingerprints(url, skip_columns=skip, skip_tables=tables) for url in (url_a, url_b))
    found = [f"{t}: {a.get(t)} != {b.get(t)}" for t in sorted(set(a) | set(b)) if a.get(t) != b.get(t)]
    refs_a, refs_b = _references(url_a), _references(url_b)
    found += [f"{t}.{ID_REFERENCES[t][0]} differs" for t in ID_REFERENCES if refs_a[t] != refs_b[t]]
    vectors_a, vectors_b = _vectors(url_a), _vectors(url_b)
    for table in EMBEDDED:
        left, right = vectors_a[table], vectors_b[table]
        if left.keys() != right.keys() or any(not np.allclose(left[k], right[k], atol=HALFVEC_ATOL) for k in left):
            found.append(f"{table}.embedding differs")
    return found


def _references(url: str) -> dict[str, list[tuple[str, str]]]:
    with psycopg.connect(url) as conn:
        return {table: sorted(conn.execute(sql.SQL(
            "SELECT {label}, {target_label} FROM {table} t JOIN {table} target ON target.id = t.{column}").format(
                label=sql.SQL(label), target_label=sql.SQL(label.replace("t.", "target.")),
                table=sql.Identifier(table), column=sql.Identifier(column))).fetchall())
            for table, (column, label) in ID_REFERENCES.items()}


def _vectors(url: str) -> dict[str, dict[str, np.ndarray]]:
    """Each embedded table's vectors by an md5 of the rest of their row's content."""
    out = {}
    with psycopg.connect(url) as conn:
        register_vector_types(conn)
        for table in EMBEDDED:
            columns = _columns(conn, table, AUDIT_COLUMNS | {"embedding", "merged_into"})
            content = sql.SQL("md5(concat_ws('|', {}))").format(
                sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in columns))
            out[table] = {key: vector.to_numpy() for key, vector in conn.execute(sql.SQL(
                "SELECT {}, embedding FROM {} WHERE embedding IS NOT NULL").format(content, sql.Identifier(table)))}
    return out

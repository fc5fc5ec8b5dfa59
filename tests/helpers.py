"""Shared test helpers (no fixtures here: see conftest.py)."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterable
from pathlib import Path

import dagster as dg
import psycopg
from psycopg import sql

from assets.resources import EmbedderResource, LifecycleSettings, MemorySettings, ModelResource, PostgresResource, SummarySettings, TranscriptSource
from memory_pipelines.db.connection import with_database  # noqa: F401 (tests import it from here)


ENTRY = Path(sys.executable).parent / "memory-pipelines"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]




# Dagster's console logger at WARNING: a failing test shows what matters, not every event.
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}

AUDIT_COLUMNS = frozenset({"run_id", "ingested_run_id", "ingested_at", "created_at", "updated_at",
                           "quarantined_at", "archived_at", "id"})
# jsonb copies of whole rows (memory_archive.row_data): compared without the skipped columns' keys.
ROW_COPY_COLUMNS = frozenset({"row_data"})


def table_fingerprints(url: str, tables: Iterable[str] | None = None, *, skip_columns: frozenset = frozenset(),
                       skip_tables: tuple[str, ...] = ("schema_migrations",)) -> dict[str, tuple[int, str]]:
    """Row count and an md5 over every row of each table (all public tables by default),
    in a stable order."""
    with psycopg.connect(url) as conn:
        if tables is None:
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                "AND table_type = 'BASE TABLE' AND NOT table_name = ANY(%s) ORDER BY 1", (list(skip_tables),))]
        out = {}
        for table in tables:
            columns = [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'public' "
                "AND table_name = %s ORDER BY ordinal_position", (table,)) if r[0] not in skip_columns]
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
    return table_fingerprints(url, tables, skip_columns=AUDIT_COLUMNS, skip_tables=("schema_migrations", "llm_calls"))


def pipeline_resources(url: str, transcripts: Path, *, llm: ModelResource | None = None,
                       decision: ModelResource | None = None, chunk_chars: int | None = None, **source) -> dict:
    settings = SummarySettings() if chunk_chars is None else SummarySettings(chunk_chars=chunk_chars)
    return {
        "postgres": PostgresResource(database_url=url),
        "transcript_source": TranscriptSource(path=str(transcripts), **source),
        "llm": llm or ModelResource(),
        "decision": decision or ModelResource(),
        "summary_settings": settings,
        "memory_settings": MemorySettings(),
        "embedder": EmbedderResource(),
        "lifecycle": LifecycleSettings(),
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

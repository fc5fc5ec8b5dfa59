"""Shared test helpers (no fixtures here: see conftest.py)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import dagster as dg
import psycopg
from psycopg import sql

from assets.resources import PostgresResource, TranscriptSource


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def table_fingerprints(url: str, tables: Iterable[str] | None = None) -> dict[str, tuple[int, str]]:
    """Row count and an md5 over every row of each table, in a stable order."""
    with psycopg.connect(url) as conn:
        if tables is None:
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' "
                "AND table_type = 'BASE TABLE' AND table_name <> 'schema_migrations' ORDER BY 1")]
        out = {}
        for table in tables:
            row = conn.execute(sql.SQL(
                "SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') FROM {} AS t"
            ).format(sql.Identifier(table))).fetchone()
            out[table] = (row[0], row[1])
        return out


def materialize_partitions(assets, keys: Iterable[str], url: str, transcripts: Path,
                           instance: dg.DagsterInstance | None = None, **source) -> list[dg.ExecuteInProcessResult]:
    instance = instance or dg.DagsterInstance.ephemeral()
    resources = {
        "postgres": PostgresResource(database_url=url),
        "transcript_source": TranscriptSource(path=str(transcripts), **source),
    }
    results = []
    for key in keys:
        result = dg.materialize(assets, partition_key=key, resources=resources, instance=instance)
        assert result.success, key
        results.append(result)
    return results


def materialization_metadata(result: dg.ExecuteInProcessResult, asset_key: str) -> dict:
    [mat] = result.asset_materializations_for_node(asset_key)
    return {k: v.value for k, v in mat.metadata.items()}

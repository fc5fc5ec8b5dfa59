"""Migrations against the embedded server: idempotent, concurrent, guarded."""

from __future__ import annotations

import logging
import multiprocessing
import uuid

import psycopg
import pytest
from psycopg import sql

from memory_pipelines.db import migrations
from memory_pipelines.db.migrations import MigrationError, load_migrations, migrate
from tests.helpers import table_fingerprints, with_database


@pytest.fixture
def empty_database(pg_admin_url):
    name = "e_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield with_database(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def _schema(url):
    with psycopg.connect(url) as conn:
        return conn.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'public' ORDER BY 1, 2"
        ).fetchall()


def test_migrate_applies_everything_once(empty_database):
    applied = migrate(empty_database)
    assert [m.version for m in applied] == [m.version for m in load_migrations()]
    schema = _schema(empty_database)
    assert migrate(empty_database) == []
    assert _schema(empty_database) == schema
    with psycopg.connect(empty_database) as conn:
        extensions = {r[0] for r in conn.execute("SELECT extname FROM pg_extension")}
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
    assert {"vector", "pg_trgm"} <= extensions
    assert {"messages", "sessions", "quarantine", "schema_migrations"} <= tables


def _migrate_in_child(url, queue):
    try:
        queue.put(len(migrate(url)))
    except Exception as exc:  # reported to the parent, which fails the test
        queue.put(repr(exc))


def test_concurrent_migrations_from_several_processes(empty_database):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_migrate_in_child, args=(empty_database, queue)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    results = sorted(queue.get(timeout=5) for _ in procs)
    # exactly one process applied the migrations, the others found nothing to do
    assert results == [0, 0, 0, len(load_migrations())]
    with psycopg.connect(empty_database) as conn:
        assert conn.execute("SELECT count(*) FROM schema_migrations").fetchone()[0] == len(load_migrations())


def test_a_changed_migration_is_refused(empty_database):
    migrate(empty_database)
    with psycopg.connect(empty_database) as conn:
        conn.execute("UPDATE schema_migrations SET checksum = 'tampered' WHERE version = 1")
    with pytest.raises(MigrationError, match="changed after it was applied"):
        migrate(empty_database)


def test_without_pg_trgm_rights_migrations_still_apply_and_warn_once(empty_database, caplog, monkeypatch):
    """A role that may not create extensions stands in for a server without pg_trgm."""
    role = "limited_" + uuid.uuid4().hex[:8]
    with psycopg.connect(empty_database, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT CREATE, USAGE ON SCHEMA public TO {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM PUBLIC").format(
            sql.Identifier(conn.info.dbname)))
    limited_url = empty_database.replace("postgres:@", f"{role}:@", 1)
    monkeypatch.setattr(migrations, "_trgm_warned", False)
    with caplog.at_level(logging.WARNING, logger="memory_pipelines.db.migrations"):
        migrate(limited_url)
        migrate(limited_url)
    warnings = [r for r in caplog.records if "pg_trgm is not available" in r.getMessage()]
    assert len(warnings) == 1
    with psycopg.connect(empty_database) as conn:
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pg_trgm'").fetchone()[0] == 0
        # the trigram-index migration waits for the extension; everything else is applied
        applied = {r[0] for r in conn.execute("SELECT name FROM schema_migrations")}
    assert "trigram_indexes" not in applied and "facts_chunks" in applied
    assert "messages" in table_fingerprints(empty_database)

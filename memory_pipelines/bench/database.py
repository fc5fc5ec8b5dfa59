"""A benchmark's database of its own on the configured server, never the pipeline's: made
empty for each run (`fresh_database`), or built once and reused while what it was built from
matches (`reused_or_built`, recorded in its `bench_search_meta` table)."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit

import psycopg

from memory_pipelines.config import Settings
from memory_pipelines.db import bench as bench_db
from memory_pipelines.db.connection import resolve_url, with_database
from memory_pipelines.db.migrations import MigrationError, migrate

PREFIX = "memory_bench_"  # every benchmark database's name starts with it


def _url(server: str, name: str) -> str:
    """The URL of the database `name` on the server `server` points at. Refuses any name but a
    benchmark's, and the database `server` names."""
    if not name.startswith(PREFIX) or urlsplit(server).path.lstrip("/") == name:
        raise ValueError(f"refusing to use {name!r} as a benchmark database")
    return with_database(server, name)


def _recreate(server: str, name: str) -> str:
    """The benchmark database `name`, dropped if it exists and created empty; its URL."""
    url = _url(server, name)
    with psycopg.connect(server, autocommit=True) as admin:
        bench_db.recreate_database(admin, name)
    return url


def fresh_database(settings: Settings, name: str) -> str:
    """A benchmark's own database on the configured server, empty (dropped first if it exists)."""
    return _recreate(resolve_url(settings.database_url, settings.home), name)


def reused_or_built(server: str, name: str, params: dict, build: Callable[[str], None], *, rebuild: bool = False,
                    progress: Callable[[str], None] = lambda _: None) -> tuple[str, bool, float | None]:
    """The benchmark database `name` on the server `server` points at: reused while it was
    built from `params` and its build finished (a newer schema migrated onto it), else (or
    with `rebuild`) created again, migrated, and filled by `build(url)`. Returns its URL,
    whether it was reused, and the seconds its build took."""
    url = _url(server, name)
    with psycopg.connect(server, autocommit=True) as admin:
        exists = bench_db.database_exists(admin, name)
    if exists and not rebuild:
        with psycopg.connect(url) as conn:
            bench_db.create_meta_table(conn)
            meta = bench_db.build_meta(conn)
        if meta and meta[0] == params and meta[1]:
            try:
                migrate(url)  # a newer schema applies to the data already there
                return url, True, meta[2]
            except MigrationError as exc:
                progress(f"{name} cannot be migrated ({exc}): rebuilding")
        else:
            progress(f"{name} was built from other parameters or not finished: rebuilding")
    _recreate(server, name)
    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        bench_db.create_meta_table(conn)
        bench_db.record_build_start(conn, params)
    started = time.perf_counter()
    build(url)
    seconds = time.perf_counter() - started
    with psycopg.connect(url, autocommit=True) as conn:
        bench_db.record_build_complete(conn, seconds)
    return url, False, seconds

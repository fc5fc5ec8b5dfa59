"""The database URL and the one connection pool per process."""

from __future__ import annotations

import atexit
import logging
import threading
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.db import embedded
from memory_pipelines.db.jsonb import register_json_types
from memory_pipelines.db.migrations import migrate
from memory_pipelines.db.vectors import register_vector_types

log = logging.getLogger(__name__)

_pools: dict[str, ConnectionPool] = {}
_lock = threading.Lock()


def resolve_url(database_url: str | None, home: Path) -> str:
    """`database_url` (MEMORY_DATABASE_URL) when set, else the embedded server under `home`."""
    if database_url:
        return database_url
    return embedded.start(home)


def with_database(url: str, name: str) -> str:
    """`url` pointing at the database `name` on the same server."""
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def _configure(conn: psycopg.Connection) -> None:
    register_vector_types(conn)
    register_json_types(conn)
    # registering reads the catalog; end that transaction before the pool hands it out.
    conn.commit()


def get_pool(url: str, max_size: int = 4) -> ConnectionPool:
    """The process's pool for `url`, migrating the database the first time it is asked for."""
    with _lock:
        pool = _pools.get(url)
        if pool is None:
            migrate(url)
            # check: an idle connection killed by a server restart is replaced before it is
            # handed out, so a step retried after a restart does not inherit a dead one.
            pool = ConnectionPool(url, min_size=1, max_size=max_size, configure=_configure,
                                  check=ConnectionPool.check_connection, open=True)
            _pools[url] = pool
        return pool


def close_pools() -> None:
    with _lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()


atexit.register(close_pools)

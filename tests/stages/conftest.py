"""Stage tests without Dagster: each stage's `run()` called directly against the real
database (the `database_url` fixture of tests/conftest.py: a fresh clone of the migrated
template per test). Helpers that run a stage and the stages before it: `tests.stages.chain`."""

from __future__ import annotations

import pytest
from psycopg_pool import ConnectionPool

from memory_pipelines.db.connection import get_pool


@pytest.fixture
def pool(database_url) -> ConnectionPool:
    """The connection pool the stages are given (closed with the test's database)."""
    return get_pool(database_url)

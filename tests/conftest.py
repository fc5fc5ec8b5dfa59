"""One embedded PostgreSQL per test session; a template database cloned for each test."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from memory_pipelines.db import embedded
from memory_pipelines.db.connection import close_pools
from memory_pipelines.db.migrations import migrate
from memory_pipelines.llm import backends
from tests.helpers import with_database
from tests.portability import install_vector_traps

TEMPLATE_DB = "mp_template"


def _admin(url: str, statement: str, *names: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL(statement).format(*(sql.Identifier(n) for n in names)))


@pytest.fixture(scope="session")
def pg_home() -> Path:
    # Outside pytest's temp folders, which another pytest run may rotate away under a live
    # server; and short, because the server's Unix socket lives in its data folder.
    home = Path(tempfile.mkdtemp(prefix="mp-pg-"))
    yield home
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_admin_url(pg_home):
    url = embedded.start(pg_home)
    # every database made on this server, the template's clones and the benchmarks' own,
    # sees pgvector as a CPU without AVX-512 does (tests/portability.py)
    template1 = with_database(url, "template1")
    _admin(template1, "CREATE EXTENSION IF NOT EXISTS vector")
    install_vector_traps(template1)
    _admin(url, "DROP DATABASE IF EXISTS {}", TEMPLATE_DB)
    _admin(url, "CREATE DATABASE {}", TEMPLATE_DB)
    migrate(with_database(url, TEMPLATE_DB))
    yield url
    close_pools()
    embedded.stop(pg_home)


def _clones(admin_url: str, template: str, prefix: str):
    """Yields a function that creates databases cloned from `template`, then drops them."""
    names = []

    def make() -> str:
        name = prefix + uuid.uuid4().hex[:16]
        _admin(admin_url, "CREATE DATABASE {} TEMPLATE {}", name, template)
        names.append(name)
        return with_database(admin_url, name)

    yield make
    close_pools()
    for name in names:
        _admin(admin_url, "DROP DATABASE IF EXISTS {} WITH (FORCE)", name)


@pytest.fixture
def make_database(pg_admin_url):
    """Creates fresh, migrated databases (cloned from the template); dropped after the test."""
    yield from _clones(pg_admin_url, TEMPLATE_DB, "t_")


@pytest.fixture(scope="module")
def make_module_database(pg_admin_url):
    """make_database for module-scoped fixtures, such as a UI server a module's tests share."""
    yield from _clones(pg_admin_url, TEMPLATE_DB, "t_")


@pytest.fixture
def database_url(make_database, monkeypatch) -> str:
    """A fresh, migrated database for one test; MEMORY_DATABASE_URL points at it."""
    url = make_database()
    monkeypatch.setenv("MEMORY_DATABASE_URL", url)
    return url


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path_factory, monkeypatch):
    """Tests never touch the developer's own state folder or Dagster instance."""
    base = tmp_path_factory.getbasetemp()
    monkeypatch.setenv("MEMORY_HOME", str(base / "memory-home"))
    # one per test: an instance config a test pointed at its own (later dropped) database
    # must not outlive it
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path_factory.mktemp("dagster-home")))
    monkeypatch.delenv("MEMORY_DATABASE_URL", raising=False)
    monkeypatch.delenv("MEMORY_TRANSCRIPTS", raising=False)
    # The lexical embedder, as the in-process asset tests use: a CLI process spared loading
    # torch takes seconds less. The local embedder's own tests, and the README's default run,
    # unset it.
    monkeypatch.setenv("MEMORY_EMBED_BACKEND", "hashing")
    # the answer format each model server took is kept per process; a later test's server may
    # get a port an earlier one had
    monkeypatch.setattr(backends, "_ANSWER_FORMATS", {})


SAMPLE_DB = "mp_sample"


@pytest.fixture(scope="session")
def sample_template(pg_admin_url) -> str:
    """The bundled sample distilled once per worker (every asset, every day, the default test
    resources), for tests that read a distilled sample to clone instead of building their own."""
    from assets.definitions import all_assets
    from memory_pipelines.config import SAMPLE_TRANSCRIPTS
    from tests.helpers import SAMPLE_DAYS, materialize_partitions

    _admin(pg_admin_url, "DROP DATABASE IF EXISTS {} WITH (FORCE)", SAMPLE_DB)
    _admin(pg_admin_url, "CREATE DATABASE {} TEMPLATE {}", SAMPLE_DB, TEMPLATE_DB)
    materialize_partitions(all_assets, SAMPLE_DAYS, with_database(pg_admin_url, SAMPLE_DB), SAMPLE_TRANSCRIPTS)
    close_pools()  # a template database takes no connections
    return SAMPLE_DB


@pytest.fixture
def make_sample_database(pg_admin_url, sample_template):
    """Creates copies of the distilled sample; dropped after the test."""
    yield from _clones(pg_admin_url, sample_template, "s_")


@pytest.fixture(scope="module")
def make_module_sample_database(pg_admin_url, sample_template):
    """make_sample_database for module-scoped fixtures."""
    yield from _clones(pg_admin_url, sample_template, "s_")


@pytest.fixture(scope="session")
def s3_endpoint() -> str:
    """A moto S3 server of this pytest worker's own; its endpoint URL (`http://127.0.0.1:PORT`)."""
    from tests.s3_server import moto_server

    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3_bucket(s3_endpoint, monkeypatch) -> tuple[str, str]:
    """A fresh, empty bucket at the test S3 server: (endpoint URL, bucket name). The fake
    AWS_* credentials and MEMORY_S3_ENDPOINT_URL are set for the test (none of a developer's
    own AWS settings leak in); write objects with tests.s3_server.put_object."""
    from tests.s3_server import FAKE_CREDENTIALS, FOREIGN_AWS_VARIABLES, create_bucket

    for name in FOREIGN_AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("MEMORY_S3_ENDPOINT_URL", s3_endpoint)
    bucket = "t-" + uuid.uuid4().hex[:16]
    create_bucket(s3_endpoint, bucket)
    return s3_endpoint, bucket

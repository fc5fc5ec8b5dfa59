"""Numbered, idempotent migrations from `sql/migrations/NNNN_name.sql`.

Each file runs in its own transaction and is recorded in `schema_migrations` with a
checksum; a session-level advisory lock lets several processes migrate at once.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg

from memory_pipelines.db.queries import query, sql_dir

log = logging.getLogger(__name__)

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_REQUIRES = re.compile(r"^--\s*requires-extension:\s*([a-z0-9_]+)\s*$", re.MULTILINE)
# Arbitrary constant: the advisory lock key every migrating process agrees on.
MIGRATION_LOCK_KEY = 7_310_551_203
_trgm_warned = False


class MigrationError(RuntimeError):
    pass


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def requires(self) -> tuple[str, ...]:
        """Extensions the migration needs; without them it is skipped until they exist."""
        return tuple(_REQUIRES.findall(self.sql))

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(folder: Path | None = None) -> list[Migration]:
    folder = folder or sql_dir() / "migrations"
    found: list[Migration] = []
    for path in sorted(folder.glob("*.sql")):
        match = _FILE.match(path.name)
        if not match:
            raise MigrationError(f"migration file name must look like 0001_name.sql: {path.name}")
        found.append(Migration(int(match.group(1)), match.group(2), path.read_text(encoding="utf-8")))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migrations share a number in {folder}")
    return found


def _ensure_trigram(conn: psycopg.Connection) -> bool:
    """Create pg_trgm when the server allows it; without it search falls back to ILIKE."""
    global _trgm_warned
    try:
        with conn.transaction():
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        return True
    except psycopg.Error as exc:
        if not _trgm_warned:
            log.warning("pg_trgm is not available (%s); text search falls back to plain ILIKE", exc)
            _trgm_warned = True
        return False


def migrate(url: str) -> list[Migration]:
    """Apply every pending migration; returns the ones applied by this call."""
    applied_now: list[Migration] = []
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))
        try:
            conn.execute(query("create_schema_migrations"))
            available = {"pg_trgm"} if _ensure_trigram(conn) else set()
            done = {row[0]: row[1] for row in conn.execute(query("applied_migrations"))}
            for migration in load_migrations():
                if migration.version in done:
                    if done[migration.version] != migration.checksum:
                        raise MigrationError(
                            f"migration {migration.version:04d}_{migration.name} changed after it was applied"
                        )
                    continue
                if not set(migration.requires) <= available:
                    log.info("skipped migration %04d_%s: needs %s", migration.version, migration.name,
                             ", ".join(migration.requires))
                    continue
                with conn.transaction():
                    conn.execute(migration.sql)
                    conn.execute(
                        query("record_migration"),
                        {"version": migration.version, "name": migration.name, "checksum": migration.checksum},
                    )
                log.info("applied migration %04d_%s", migration.version, migration.name)
                applied_now.append(migration)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_KEY,))
    return applied_now


def has_extension(conn: psycopg.Connection, name: str) -> bool:
    row = conn.execute(query("extension_installed"), {"name": name}).fetchone()
    return bool(row and row[0])

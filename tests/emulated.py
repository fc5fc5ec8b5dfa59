"""The embedded server's own PostgreSQL run as another CPU runs it: under QEMU's user-mode
emulation (`qemu-x86_64 -cpu MODEL`), which executes only the instructions MODEL has and
kills the process on any other with SIGILL, as that CPU would. QEMU emulates no AVX-512 at
all, so `EPYC-Rome` is the AMD Zen 2 of the field reports: AVX2, no AVX-512."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
from pgserver._commands import POSTGRES_BIN_PATH

QEMU = "qemu-x86_64"
SERVER_USER = "pgserver"  # the user pgserver runs its servers as under root (made by the first one)
START_SECONDS = 120


def _as_server_user() -> dict:
    if os.geteuid() != 0:
        return {}
    user = pwd.getpwnam(SERVER_USER)

    def drop() -> None:
        os.setgid(user.pw_gid)
        os.setuid(user.pw_uid)

    return {"preexec_fn": drop}


def _wait_until_connectable(url: str, server: subprocess.Popen, deadline: float, log: Path,
                            raising: bool = True) -> None:
    while True:
        try:
            psycopg.connect(url, connect_timeout=5).close()
            return
        except psycopg.OperationalError:
            if server.poll() is not None or time.monotonic() > deadline:
                if raising:
                    raise AssertionError(f"the emulated server does not answer: {log.read_text()[-2000:]}") from None
                return
            time.sleep(0.3)


@contextmanager
def emulated_server(cpu: str) -> Iterator[tuple[str, Path]]:
    """A fresh server whose every process runs as CPU `cpu`: (its URL, its log)."""
    if shutil.which(QEMU) is None:
        raise AssertionError(f"{QEMU} is not installed: `apt-get install qemu-user` (.ci/run installs it)")
    folder = Path(tempfile.mkdtemp(prefix="mp-qemu-"))
    data, log = folder / "data", folder / "log"
    if os.geteuid() == 0:
        user = pwd.getpwnam(SERVER_USER)
        os.chown(folder, user.pw_uid, user.pw_gid)
    subprocess.run([str(POSTGRES_BIN_PATH / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust"],
                   check=True, capture_output=True, **_as_server_user())
    with log.open("w") as out:
        server = subprocess.Popen([QEMU, "-cpu", cpu, str(POSTGRES_BIN_PATH / "postgres"), "-D", str(data),
                                   "-k", str(folder), "-c", "listen_addresses=", "-c", "autovacuum=off"],
                                  stdout=out, stderr=subprocess.STDOUT, **_as_server_user())
    url = f"postgresql://postgres@/postgres?host={folder}"
    try:
        _wait_until_connectable(url, server, time.monotonic() + START_SECONDS, log)
        yield url, log
    finally:
        # a stop asked for while the server restarts after a crash waits out pg_ctl's minute
        _wait_until_connectable(url, server, time.monotonic() + START_SECONDS, log, raising=False)
        server.send_signal(signal.SIGINT)  # a fast shutdown
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(folder, ignore_errors=True)

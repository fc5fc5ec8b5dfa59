"""A real S3 wire server (moto) for tests, and a writer for its buckets over the same
protocol: pyarrow's S3 client, as the store under test uses, so no boto3 is needed."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
from pyarrow import fs as pafs

# moto accepts any credentials unless told to enforce IAM; these only have to be present.
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
# variables of a developer's own AWS setup that would take precedence over the fake ones or
# send the client looking for credentials elsewhere
FOREIGN_AWS_VARIABLES = ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_DEFAULT_REGION", "AWS_SHARED_CREDENTIALS_FILE",
                         "AWS_CONFIG_FILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE")
START_TIMEOUT_S = 20.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_server(env: dict[str, str] | None = None) -> Iterator[str]:
    """Runs `python -m moto.server` on a free local port until the block ends; yields its
    endpoint URL. `env` adds server settings, such as INITIAL_NO_AUTH_ACTION_COUNT=0 to
    refuse every credential."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                env={**os.environ, **(env or {})}, stdout=log, stderr=subprocess.STDOUT)
        try:
            _wait_until_up(proc, endpoint, log)
            yield endpoint
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_until_up(proc: subprocess.Popen, endpoint: str, log) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            httpx.get(endpoint + "/", timeout=1.0)
            return
        except httpx.TransportError:
            time.sleep(0.05)
    log.seek(0)
    output = log.read().decode(errors="replace")[-2000:]
    raise RuntimeError(f"moto server at {endpoint} did not answer within {START_TIMEOUT_S:.0f} s "
                       f"(exit code {proc.poll()}):\n{output}")


@functools.cache
def _writer(endpoint: str) -> pafs.S3FileSystem:
    """A client of its own that may create buckets (the store's may not), with explicit
    credentials so that it works whatever a test did to the environment."""
    parts = urlsplit(endpoint)
    return pafs.S3FileSystem(access_key=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                             secret_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                             region=FAKE_CREDENTIALS["AWS_REGION"], scheme=parts.scheme,
                             endpoint_override=parts.netloc, allow_bucket_creation=True)


def create_bucket(endpoint: str, bucket: str) -> None:
    _writer(endpoint).create_dir(bucket)


def put_object(endpoint: str, bucket: str, key: str, data: bytes) -> None:
    with _writer(endpoint).open_output_stream(f"{bucket}/{key}") as stream:
        stream.write(data)


def delete_object(endpoint: str, bucket: str, key: str) -> None:
    _writer(endpoint).delete_file(f"{bucket}/{key}")

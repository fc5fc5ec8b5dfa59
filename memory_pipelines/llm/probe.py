"""One cheap request to each configured model server before a run calls it, so a dead
server fails the run in seconds with what to change, instead of after minutes of retries."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import httpx

PROBE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ModelServer:
    """A configured server: its URL, the cheapest request it answers, and the settings that
    change it (`prefix`_BASE_URL, or `prefix`_BACKEND=`offline` to run without it)."""
    base_url: str
    probe_url: str
    prefix: str
    offline: str


class ModelServerUnreachable(RuntimeError):
    def __init__(self, server: ModelServer, cause: str):
        super().__init__(f"model server {server.base_url} unreachable ({cause}); set {server.prefix}_BASE_URL "
                         f"or {server.prefix}_BACKEND={server.offline}")
        self.server, self.cause = server, cause


def model_server(backend: str, base_url: str, prefix: str, offline: str) -> ModelServer | None:
    """The server an `ollama` or `openai` chat or embedding back end talks to; None for the
    offline back ends."""
    if backend == "ollama":
        return ModelServer(base_url, f"{base_url}/api/tags", prefix, offline)
    if backend == "openai":
        models = f"{base_url}/models" if base_url.endswith("/v1") else f"{base_url}/v1/models"
        return ModelServer(base_url, models, prefix, offline)
    return None


def _cause(exc: httpx.HTTPError) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {PROBE_TIMEOUT_S:g} s"
    text = str(exc).strip() or type(exc).__name__
    for marker, cause in (("refused", "connection refused"), ("Name or service not known", "host not found"),
                          ("nodename nor servname", "host not found"), ("unreachable", "network unreachable")):
        if marker in text:
            return cause
    return text.splitlines()[0]


def probe(servers: Iterable[ModelServer | None], timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Raise `ModelServerUnreachable` for the first server that does not answer at all. Any
    HTTP answer counts as alive (a server without a models list answers 404)."""
    seen = set()
    for server in servers:
        if server is None or server.probe_url in seen:
            continue
        seen.add(server.probe_url)
        try:
            httpx.get(server.probe_url, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise ModelServerUnreachable(server, _cause(exc)) from None

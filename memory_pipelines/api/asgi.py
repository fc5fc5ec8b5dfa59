"""What the HTTP API and MCP over HTTP share at the ASGI level: the bearer key of a request,
a bounded body, one access-log line per request, errors as `{"error": {code, message}}`."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

access_log = logging.getLogger("memory_pipelines.api.access")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ACCESS = "memory_pipelines.access"  # the scope entry a request's key id is noted in, for its log line


def bearer(headers: list[tuple[bytes, bytes]] | Any) -> str | None:
    """The key of `Authorization: Bearer <key>`, or None. `headers` is an ASGI header list
    or a mapping."""
    if isinstance(headers, list):
        value = next((v.decode("latin-1") for k, v in headers if k.lower() == b"authorization"), None)
    else:
        value = headers.get("authorization")
    if not value:
        return None
    scheme, _, secret = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return secret.strip() or None


def note_key(scope: Scope, key_id: int, admin: bool) -> None:
    """Name the key a request acted with in its access-log line (an admin's marked so:
    every request an admin key makes is on record as one)."""
    if ACCESS in scope:
        scope[ACCESS]["key_id"] = f"{key_id}(admin)" if admin else key_id


async def send_error(send: Send, status: int, code: str, message: str,
                     headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


class AccessLog:
    """One line per request: method, path (never the query string, which holds what users
    ask), status, latency and the key's id (never the key)."""

    def __init__(self, app: ASGIApp, name: str):
        self.app, self.name = app, name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        scope[ACCESS] = noted = {"key_id": None}
        status = 500
        started = time.perf_counter()

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            access_log.info("%s %s %s %d %.1fms key=%s", self.name, scope["method"], scope["path"], status,
                            (time.perf_counter() - started) * 1000, noted["key_id"] or "-")


class BodyLimit:
    """Refuses a body over `max_bytes` with 413 before the app reads any of it (a declared
    length) or once the bytes received pass it (a chunked body), and a JSON body that is not
    UTF-8 with 400."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(send)
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return await self._refuse(send)
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if b"json" in dict(scope["headers"]).get(b"content-type", b""):
            try:
                body.decode("utf-8")
            except UnicodeDecodeError as exc:
                return await send_error(send, 400, "invalid_json",
                                        f"the body is not UTF-8 (byte {exc.start}): send JSON in UTF-8")
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        await send_error(send, 413, "body_too_large",
                         f"the request body is over {self.max_bytes} bytes (MEMORY_API_MAX_BODY_BYTES)")

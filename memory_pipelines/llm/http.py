"""JSON over HTTP with retries: on timeouts, connection errors, 429 and 5xx; never on other 4xx."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any

import httpx

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class HttpCallError(RuntimeError):
    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False, attempts: int = 1):
        super().__init__(message)
        self.status, self.retryable, self.attempts = status, retryable, attempts


@dataclass(frozen=True)
class HttpReply:
    body: Any
    attempts: int
    seconds: float


def post_json(client: httpx.Client, url: str, payload: dict, *, headers: dict | None = None,
              retries: int = 3, backoff_s: float = 1.0, retry_status: frozenset[int] = RETRY_STATUS) -> HttpReply:
    started = time.perf_counter()
    attempt = 0
    while True:
        attempt += 1
        try:
            response = client.post(url, json=payload, headers=headers)
            if response.status_code in retry_status:
                raise HttpCallError(f"HTTP {response.status_code} from {url}: {response.text[:200]}",
                                    status=response.status_code, retryable=True, attempts=attempt)
            if response.status_code >= 400:
                raise HttpCallError(f"HTTP {response.status_code} from {url}: {response.text[:200]}",
                                    status=response.status_code, retryable=False, attempts=attempt)
            try:
                body = response.json()
            except ValueError as exc:
                raise HttpCallError(f"reply from {url} is not JSON: {response.text[:200]!r}",
                                    status=response.status_code, attempts=attempt) from exc
            return HttpReply(body, attempt, time.perf_counter() - started)
        except httpx.TimeoutException as exc:
            error = HttpCallError(f"timed out calling {url}: {exc}", retryable=True, attempts=attempt)
        except httpx.TransportError as exc:
            error = HttpCallError(f"connection to {url} failed: {exc}", retryable=True, attempts=attempt)
        except HttpCallError as exc:
            error = exc
        if not error.retryable or attempt > retries:
            error.attempts = attempt
            raise error
        # Exponential backoff with jitter, so parallel workers do not retry in step.
        time.sleep(backoff_s * (2 ** (attempt - 1)) * (0.5 + random.random() / 2))

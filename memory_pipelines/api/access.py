"""Who may ask what: the refusals a request can get, and the caller a live key acts as."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from memory_pipelines.api.keys import ApiKey

API = "api"  # the model and prompt version of what the API writes


class ApiError(Exception):
    """A refused request: an HTTP status, a stable code, and a message naming what to fix."""

    status = 400
    code = "invalid_request"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Unauthorized(ApiError):
    status, code = 401, "unauthorized"


class Forbidden(ApiError):
    status, code = 403, "forbidden"


class NotFound(ApiError):
    status, code = 404, "not_found"


class Conflict(ApiError):
    status, code = 409, "idempotency_conflict"


@dataclass(frozen=True)
class Caller:
    """Who is asking: a live key."""
    key: ApiKey

    def user(self, requested: str | None) -> str | None:
        """The user the request acts as: the key's own; an admin's names one, or none (every
        user, for searches). Naming another user with a user's key is refused."""
        if self.key.admin:
            return requested
        if requested is not None and requested != self.key.user_id:
            raise Forbidden(f"this key acts for user {self.key.user_id!r}, not {requested!r}")
        return self.key.user_id

    def one_user(self, requested: str | None) -> str:
        user = self.user(requested)
        if user is None:
            raise ApiError("name the user (user_id): an admin key acts for every user, a write for one")
        return user

    def lineage(self, now: datetime) -> dict:
        """What rows written for this request record about where they came from."""
        return {"run_id": f"api:key-{self.key.id}:{now.isoformat(timespec='seconds')}", "model": API,
                "prompt_version": API, "partition_key": now.date().isoformat()}

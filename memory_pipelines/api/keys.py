"""API keys: created once and shown once, stored as a sha256 hash (a key is 32 random bytes,
so a fast hash is enough), looked up by that hash on every request, revocable."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

import psycopg

from memory_pipelines.db import api as api_db

KEY_PREFIX = "mpk_"
SHOWN_CHARS = 10  # of a key, in lists: enough to tell keys apart, too few to use one


@dataclass(frozen=True)
class ApiKey:
    id: int
    name: str | None
    user_id: str | None  # None: an admin key
    admin: bool
    prefix: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(conn: psycopg.Connection, user_id: str | None, *, admin: bool = False,
               name: str | None = None) -> tuple[ApiKey, str]:
    """A new key for a user (or an admin key, for every user) and its secret, which is not
    stored: the caller shows it once."""
    if not admin and not (user_id or "").strip():
        raise ValueError("a key belongs to a user (--user U) unless it is an admin key (--admin)")
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = api_db.insert_api_key(conn, name=name, user_id=None if admin else user_id, admin=admin,
                                key_hash=hash_key(secret), prefix=secret[:SHOWN_CHARS])
    return ApiKey(**key), secret


def authenticate(conn: psycopg.Connection, secret: str) -> ApiKey | None:
    """The live key a request presents, or None (unknown or revoked)."""
    if not secret.startswith(KEY_PREFIX):
        return None
    key = api_db.api_key_by_hash(conn, hash_key(secret))
    return ApiKey(**key) if key is not None else None


def list_keys(conn: psycopg.Connection) -> list[ApiKey]:
    return [ApiKey(**key) for key in api_db.api_keys(conn)]


def revoke_key(conn: psycopg.Connection, key_id: int) -> ApiKey:
    revoked = api_db.revoke_api_key(conn, key_id)
    if revoked is None:
        raise LookupError(f"no live API key {key_id}")
    return ApiKey(**revoked)

"""What the command groups share: the errors that end a command, settings, and argument parsing."""

from __future__ import annotations

import argparse
from datetime import date

from memory_pipelines.config import Settings


class CliError(RuntimeError):
    """Ends the command with a one-line reason and exit status 1."""


class UsageError(CliError):
    """Ends the command with a one-line reason and exit status 2: the user asked for
    something that cannot be done as asked (a bad setting, a file that is no transcript)."""


def _connect_url(settings: Settings) -> str:
    from memory_pipelines.db.connection import resolve_url

    return resolve_url(settings.database_url, settings.home)


def _parse_day(text: str | None, flag: str) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{flag} must be a date like 2026-10-01, got {text!r}") from None


def _parse_moment(text: str | None, flag: str):
    """A date or an ISO time; without a zone, UTC."""
    from datetime import UTC, datetime

    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{flag} must be a date or time like 2026-10-01 or 2026-10-01T12:00, got {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _require_user(conn, user_id: str) -> None:
    from memory_pipelines.db import inventory as inventory_db

    if not inventory_db.user_known(conn, user_id):
        raise CliError(f"nothing is stored for user {user_id!r} (`memory-pipelines users` lists who has memory)")


def _require_session(conn, session_id: str, user_id: str | None = None) -> None:
    from memory_pipelines.db import search as search_db

    owner = search_db.session_owner(conn, session_id)
    if owner is None:
        raise CliError(f"no session {session_id!r} is stored (`memory-pipelines sessions --user U` lists a user's)")
    if user_id is not None and owner != user_id:
        raise CliError(f"session {session_id!r} belongs to another user than {user_id!r}")


def _say_default_embedder(settings: Settings, prefix: str, out) -> None:
    from memory_pipelines.embed import default_embedder_note

    if note := default_embedder_note(settings):
        print(f"{prefix}{note}", file=out)

"""Settings read from environment variables, with the defaults a fresh clone runs on."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

PACKAGE_DIR = Path(__file__).resolve().parent
SAMPLE_TRANSCRIPTS = PACKAGE_DIR / "sample_data" / "transcripts"
SAMPLE_BAD_INPUT = PACKAGE_DIR / "sample_data" / "bad_input"


class ConfigError(ValueError):
    """A setting has a value the pipeline cannot use."""


def default_home() -> Path:
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "memory-pipelines"


def env_text(name: str) -> str | None:
    """An environment variable's value, None when unset or blank."""
    return os.environ.get(name, "").strip() or None


def env_number(name: str, kind: type, default):
    """An environment variable read as `kind` (int or float), `default` when unset."""
    raw = env_text(name)
    if raw is None:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None


def _int_env(name: str, default: int) -> int:
    value = env_number(name, int, default)
    if value <= 0:
        raise ConfigError(f"{name} must be positive, got {value}")
    return value


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str | None
    transcripts: Path
    timezone: str
    max_message_bytes: int
    partition_start: date

    @classmethod
    def from_env(cls) -> "Settings":
        tz = os.environ.get("MEMORY_TIMEZONE", "").strip() or "UTC"
        try:
            ZoneInfo(tz)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ConfigError(f"MEMORY_TIMEZONE is not a known time zone: {tz!r}") from exc
        start_raw = os.environ.get("MEMORY_PARTITION_START", "").strip() or "2024-01-01"
        try:
            start = date.fromisoformat(start_raw)
        except ValueError as exc:
            raise ConfigError(f"MEMORY_PARTITION_START must be YYYY-MM-DD, got {start_raw!r}") from exc
        home = os.environ.get("MEMORY_HOME", "").strip()
        transcripts = os.environ.get("MEMORY_TRANSCRIPTS", "").strip()
        return cls(
            home=Path(home).expanduser() if home else default_home(),
            database_url=os.environ.get("MEMORY_DATABASE_URL", "").strip() or None,
            transcripts=Path(transcripts).expanduser() if transcripts else SAMPLE_TRANSCRIPTS,
            timezone=tz,
            max_message_bytes=_int_env("MEMORY_MAX_MESSAGE_BYTES", 1_000_000),
            partition_start=start,
        )

"""How a setting's text becomes its value: each kind parses the stripped text (raising
ValueError), says what it accepts, and writes a value back as text."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


@dataclass(frozen=True)
class Kind:
    """How a setting's text becomes its value (of `type`), what to tell a user who got it
    wrong, and how a value is written back as text (to hand settings to a child process)."""
    accepted: str
    parse: Callable[[str], object]
    type: type = str
    text: Callable[[object], str] = str


def _number(cast: type, low: float | None, high: float | None, low_open: bool = False) -> Callable[[str], object]:
    def parse(text: str):
        value = cast(text)
        if cast is float and value != value:  # NaN compares false with every bound
            raise ValueError(text)
        if low is not None and (value < low or (low_open and value == low)):
            raise ValueError(text)
        if high is not None and value > high:
            raise ValueError(text)
        return value
    return parse


def integer(low: int | None = None, high: int | None = None, accepted: str | None = None) -> Kind:
    if accepted is None:
        accepted = ("an integer" + (f" from {low} to {high}" if low is not None and high is not None
                                    else f" >= {low}" if low is not None else ""))
    return Kind(accepted, _number(int, low, high), int)


def decimal(low: float | None = None, high: float | None = None, *, low_open: bool = False,
            accepted: str | None = None) -> Kind:
    if accepted is None:
        lower = f"> {low:g}" if low_open else f">= {low:g}" if low is not None else ""
        if low is not None and high is not None:
            accepted = f"a number > {low:g} and <= {high:g}" if low_open else f"a number from {low:g} to {high:g}"
        else:
            accepted = f"a number {lower}".rstrip()
    return Kind(accepted, _number(float, low, high, low_open), float)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _boolean(text: str) -> bool:
    folded = text.lower()
    if folded in _TRUE:
        return True
    if folded in _FALSE:
        return False
    raise ValueError(text)


BOOLEAN = Kind("1/0, true/false, yes/no or on/off", _boolean, bool, lambda value: "1" if value else "0")
TEXT = Kind("any text", str)


def choice(*options: str) -> Kind:
    def parse(text: str) -> str:
        if text.lower() not in options:
            raise ValueError(text)
        return text.lower()
    return Kind("one of " + ", ".join(options), parse)


def _http_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(text)
    return text.rstrip("/")


def _dask_address(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("tcp", "tls") or not parts.hostname or parts.port is None:
        raise ValueError(text)
    return text


def _postgres_url(text: str) -> str:
    if urlsplit(text).scheme not in ("postgresql", "postgres"):
        raise ValueError(text)
    return text


def _zone(text: str) -> str:
    try:
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(text) from None
    return text


def _cron(text: str) -> str:
    fields = text.split()
    if len(fields) != 5 or not all(re.fullmatch(r"[\w*/,\-?#]+", f) for f in fields):
        raise ValueError(text)
    return " ".join(fields)


def _existing_file(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file():
        raise ValueError(text)
    return path


def _json_object_file(text: str) -> Path:
    path = _existing_file(text)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ValueError(text) from None
    if not isinstance(data, dict):
        raise ValueError(text)
    return path


def _transcript_location(text: str) -> str:
    """A folder or file path, an s3://bucket/prefix, or a postgresql:// URL naming ?table=."""
    parts = urlsplit(text)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise ValueError(text)
        return text
    if parts.scheme in ("postgresql", "postgres"):
        if not parse_qs(parts.query).get("table"):
            raise ValueError(text)
        return text
    if "://" in text:
        raise ValueError(text)
    return str(Path(text).expanduser())


def _name_mapping(text: str) -> dict[str, str]:
    """`canonical=source,…`, or the path of a YAML file holding such a mapping."""
    if text.endswith((".yaml", ".yml")):
        import yaml

        try:
            data = yaml.safe_load(Path(text).expanduser().read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError):
            raise ValueError(text) from None
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ValueError(text)
        text = ",".join(f"{k}={v}" for k, v in data.items())
    from memory_pipelines.formats import parse_field_mapping

    return parse_field_mapping(text)


HTTP_URL = Kind("an http:// or https:// URL", _http_url)
POSTGRES_URL = Kind("a postgresql:// URL", _postgres_url)
ZONE = Kind("an IANA time zone such as UTC or Europe/Berlin", _zone)
DAY = Kind("a date like 2024-01-01", date.fromisoformat, date, date.isoformat)
PATH = Kind("a file or folder path", lambda text: Path(text).expanduser(), Path)
TRANSCRIPT_LOCATION = Kind("a file or folder path, s3://bucket/prefix, or postgresql://…?table=NAME",
                           _transcript_location)
NAME_MAPPING = Kind("comma-separated canonical=field pairs such as session_id=conversation_id,user_id=owner "
                    "(canonical: session_id, user_id, seq, role, content, ts, agent_id, tool_name, tool_args, "
                    "tool_call_id, metadata, parent_session_id, fork_seq, id), or a .yaml file of such a mapping",
                    _name_mapping, dict, lambda mapping: ",".join(f"{k}={v}" for k, v in mapping.items()))
CRON = Kind("a cron expression of five fields, such as */15 * * * *", _cron)
PRICE_TABLE = Kind("the path of a JSON file holding an object of model -> prices", _json_object_file, Path)
DASK_ADDRESS = Kind("tcp://HOST:PORT or tls://HOST:PORT", _dask_address)

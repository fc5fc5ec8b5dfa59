"""Every `MEMORY_*` setting in one place: its type, range, default and meaning.

Each variable is parsed by its spec, once per value, so a bad value fails the same way
wherever it is read: one line naming the variable, the value and what is accepted
(`ConfigError`). `validate_environment()` checks them all before anything runs;
`effective_settings()` is what `memory-pipelines config` prints.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from memory_pipelines.records import TRANSCRIPT_FORMATS

PACKAGE_DIR = Path(__file__).resolve().parent
SAMPLE_TRANSCRIPTS = PACKAGE_DIR / "sample_data" / "transcripts"
SAMPLE_BAD_INPUT = PACKAGE_DIR / "sample_data" / "bad_input"

LLM_BACKENDS = ("ollama", "openai", "rules")
JUDGING_SHARES = ("day", "user", "session")  # what one noise-judging call may hold
EMBED_BACKENDS = ("ollama", "openai", "local", "hashing")
CONSENT_BASES = ("legitimate_interest", "consent", "legal_obligation", "vital_interest", "public_task", "not_set")
# The highest score navra's formula gives memory nobody searched: importance (at most 1)
# with no boost. A threshold above it would archive everything old enough.
MAX_DECAY_THRESHOLD = 1.0


class ConfigError(ValueError):
    """A setting has a value the pipeline cannot use."""


def default_home() -> Path:
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "memory-pipelines"


# The first line of a dagster.yaml memory-pipelines wrote (and may write again); one without
# it is the user's own and left alone.
MANAGED_MARK = "# Managed by memory-pipelines"


def dagster_home(home: Path) -> Path:
    """DAGSTER_HOME, default MEMORY_HOME/dagster."""
    return Path(os.environ.get("DAGSTER_HOME") or home / "dagster")


# --- parsers: each takes the stripped text and returns the value, or raises ValueError ---

@dataclass(frozen=True)
class Kind:
    """How a setting's text becomes its value, and what to tell a user who got it wrong."""
    accepted: str
    parse: Callable[[str], object]


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
    return Kind(accepted, _number(int, low, high))


def decimal(low: float | None = None, high: float | None = None, *, low_open: bool = False,
            accepted: str | None = None) -> Kind:
    if accepted is None:
        lower = f"> {low:g}" if low_open else f">= {low:g}" if low is not None else ""
        if low is not None and high is not None:
            accepted = f"a number > {low:g} and <= {high:g}" if low_open else f"a number from {low:g} to {high:g}"
        else:
            accepted = f"a number {lower}".rstrip()
    return Kind(accepted, _number(float, low, high, low_open))


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _boolean(text: str) -> bool:
    folded = text.lower()
    if folded in _TRUE:
        return True
    if folded in _FALSE:
        return False
    raise ValueError(text)


BOOLEAN = Kind("1/0, true/false, yes/no or on/off", _boolean)
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
DAY = Kind("a date like 2024-01-01", date.fromisoformat)
PATH = Kind("a file or folder path", lambda text: Path(text).expanduser())
TRANSCRIPT_LOCATION = Kind("a file or folder path, s3://bucket/prefix, or postgresql://…?table=NAME",
                           _transcript_location)
NAME_MAPPING = Kind("comma-separated canonical=field pairs such as session_id=conversation_id,user_id=owner "
                    "(canonical: session_id, user_id, seq, role, content, ts, agent_id, tool_name, tool_args, "
                    "tool_call_id, metadata, parent_session_id, fork_seq, id), or a .yaml file of such a mapping",
                    _name_mapping)
CRON = Kind("a cron expression of five fields, such as */15 * * * *", _cron)
PRICE_TABLE = Kind("the path of a JSON file holding an object of model -> prices", _json_object_file)


@dataclass(frozen=True)
class Spec:
    name: str
    kind: Kind
    default: object  # None: unset (or derived: see `derived`)
    help: str
    secret: bool = False
    derived: str | None = None  # where the value comes from when unset, if not `default`


def _model_specs(prefix: str, inherits: bool) -> list[Spec]:
    """A chat model's settings; the decision model's unset ones follow the chat model's."""
    from_chat = "MEMORY_LLM_* when the back end is the same, else the back end's default" if inherits else None
    same = "as MEMORY_LLM_*" if inherits else None
    return [
        Spec(f"{prefix}_BACKEND", choice(*LLM_BACKENDS), "rules",
             "the decision model (noise, overturned entries, relevance)" if inherits else "the chat model (summaries, facts, knowledge)"),
        Spec(f"{prefix}_BASE_URL", HTTP_URL, None, "model server URL", derived=from_chat or "the back end's default"),
        Spec(f"{prefix}_MODEL", TEXT, None, "model name", derived=from_chat or "the back end's default"),
        Spec(f"{prefix}_API_KEY", TEXT, None, "bearer token", secret=True, derived=from_chat),
        Spec(f"{prefix}_TIMEOUT", decimal(0, low_open=True), None if inherits else 120.0, "seconds per call", derived=same),
        Spec(f"{prefix}_RETRIES", integer(0, 20), None if inherits else 3, "retries after the first attempt", derived=same),
        Spec(f"{prefix}_BACKOFF", decimal(0), None if inherits else 1.0, "first backoff in seconds", derived=same),
        Spec(f"{prefix}_CONCURRENCY", integer(1, 64), None if inherits else 1, "sessions in parallel", derived=same),
        Spec(f"{prefix}_BATCH_TOKENS", integer(0), None if inherits else 8000,
             "estimated prompt tokens of one noise-judging call (0: one call per session)", derived=same),
        Spec(f"{prefix}_MAX_OUTPUT_TOKENS", integer(16), None if inherits else 2048,
             "the most tokens one answer may have (a small model can run on without end)", derived=same),
        Spec(f"{prefix}_SHARE", choice(*JUDGING_SHARES), None if inherits else "day",
             "what one noise-judging call may hold: a day's sessions of any users (day), of one user (user), "
             "or one session (session)", derived=same),
    ]


SPECS: dict[str, Spec] = {s.name: s for s in [
    Spec("MEMORY_HOME", PATH, None, "state folder: embedded database data, Dagster home",
         derived="~/.local/share/memory-pipelines"),
    Spec("MEMORY_DATABASE_URL", POSTGRES_URL, None, "a PostgreSQL with pgvector (unset: the embedded server)",
         secret=True),
    Spec("MEMORY_TRANSCRIPTS", TRANSCRIPT_LOCATION, str(SAMPLE_TRANSCRIPTS),
         "where transcripts are read: a file or folder, s3://bucket/prefix, or postgresql://…?table=NAME"),
    Spec("MEMORY_TRANSCRIPT_FORMAT", choice("auto", *TRANSCRIPT_FORMATS), "auto",
         "how transcript files are read (auto: detected per file; see docs/formats.md)"),
    Spec("MEMORY_FORMAT_FIELDS", NAME_MAPPING, None, "where the openai and agent-events formats find session, user "
         "and time fields (dotted paths), overriding the defaults"),
    Spec("MEMORY_SOURCE_USER", TEXT, None, "the user a source's transcripts belong to when its format names none "
         "(agent-events logs, conversations.json exports)"),
    Spec("MEMORY_S3_ENDPOINT_URL", HTTP_URL, None, "an S3-compatible endpoint for s3:// transcripts (unset: AWS; "
         "credentials from the AWS_* variables)"),
    Spec("MEMORY_SOURCE_COLUMNS", NAME_MAPPING, None, "the columns of a postgresql:// transcript table that hold "
         "each canonical field (unset: columns of the canonical names)"),
    Spec("MEMORY_SOURCE_BATCH_ROWS", integer(1), 5000, "rows a postgresql:// transcript table is read in at a time"),
    Spec("MEMORY_TRANSCRIPT_CACHE_MB", integer(1), 128, "megabytes of transcript files a run keeps validated for "
         "its later days (about 1.25 times that in memory); a file past it is validated again for each day it holds"),
    Spec("MEMORY_TIMEZONE", ZONE, "UTC", "zone for timestamps written without one"),
    Spec("MEMORY_MAX_MESSAGE_BYTES", integer(1), 1_000_000, "larger records are quarantined"),
    Spec("MEMORY_PARTITION_START", DAY, None,
         "the first daily partition; days before it cannot be run (unset: where the data starts, read when the "
         "assets load)",
         derived="the first transcript day the database knows (its earliest message or indexed transcript file), "
                 "else 2024-01-01"),
    *_model_specs("MEMORY_LLM", inherits=False),
    *_model_specs("MEMORY_DECISION", inherits=True),
    Spec("MEMORY_PRICE_TABLE", PRICE_TABLE, None, "JSON price table for estimated cost"),
    Spec("MEMORY_RUN_TOKEN_BUDGET", integer(0), 0, "most tokens one run may spend on model calls (0: no limit)"),
    Spec("MEMORY_SUMMARY_LANGUAGE", TEXT, "auto", "the summaries' language (auto follows the conversation)"),
    Spec("MEMORY_SUMMARY_CHUNK_CHARS", integer(1000), 32_000, "transcript characters per summary call"),
    Spec("MEMORY_STALE_MINUTES", integer(1), 30, "minutes without activity before a session is extracted"),
    Spec("MEMORY_CONTEXT_MESSAGES", integer(1, 1000), 16, "a session's last messages kept out of chunks"),
    Spec("MEMORY_PII_SANITIZE", BOOLEAN, True, "sanitize PII in knowledge entries"),
    Spec("MEMORY_ENTRY_TTL_SECONDS", integer(1), None, "valid_until of new knowledge entries (unset: none)"),
    Spec("MEMORY_CONSENT_BASIS", choice(*CONSENT_BASES), "not_set", "consent basis of new knowledge entries"),
    Spec("MEMORY_DECAY_MIN_AGE_DAYS", integer(1), 90,
         "days (conversation time) a memory must be old, and unaccessed, before decay may archive it"),
    Spec("MEMORY_DECAY_THRESHOLD", decimal(0, MAX_DECAY_THRESHOLD,
                                           accepted=f"a number from 0 to {MAX_DECAY_THRESHOLD:g} (0: never by score)"),
         0.5, "decay archives old, unaccessed memory scoring below this"),
    Spec("MEMORY_DECAY_BASE_RATE", decimal(0, 1, low_open=True), 0.001, "decay rate per hour"),
    Spec("MEMORY_DECAY_FACTS", BOOLEAN, False, "decay memory_facts too (they have expires_at for time limits)"),
    Spec("MEMORY_PII_RETENTION_DAYS", integer(1), 180, "entries holding PII are archived after this many days"),
    Spec("MEMORY_EMBED_BACKEND", choice(*EMBED_BACKENDS), None, "the embedder",
         derived="local when its extra is installed, else hashing"),
    Spec("MEMORY_EMBED_BASE_URL", TEXT, None, "embedding server URL (local: a model folder)",
         derived="the chat model's host when the back end is the same"),
    Spec("MEMORY_EMBED_MODEL", TEXT, None, "embedding model", derived="the back end's default"),
    Spec("MEMORY_EMBED_API_KEY", TEXT, None, "bearer token", secret=True),
    Spec("MEMORY_EMBED_DIM", integer(2, 65536), None, "dimension (hashing; OpenAI `dimensions`)",
         derived="the model's"),
    Spec("MEMORY_EMBED_BATCH", integer(1, 4096), None, "texts per embedding request", derived="8 remote, 64 local"),
    Spec("MEMORY_EMBED_PAUSE", decimal(0), 0.0, "seconds between remote batches"),
    Spec("MEMORY_EMBED_TIMEOUT", decimal(0, low_open=True), 120.0, "seconds per embedding request"),
    Spec("MEMORY_EMBED_RETRIES", integer(0, 20), 3, "retries after the first attempt"),
    Spec("MEMORY_EMBED_BACKOFF", decimal(0), 1.0, "first backoff in seconds"),
    Spec("MEMORY_RETRY_MAX", integer(0, 20), 2, "retries of a failed step"),
    Spec("MEMORY_RETRY_DELAY", decimal(0), 10.0, "seconds before a step's first retry"),
    Spec("MEMORY_SCHEDULE_CRON", CRON, "*/15 * * * *", "when the schedule distills today's partition"),
    Spec("MEMORY_AUTOMATION", BOOLEAN, False, "start the schedule and sensor running in `dagster dev`"),
    Spec("MEMORY_SHARDS", integer(1, 1024), 1,
         "user shards: above 1 the assets are partitioned by day x shard, a shard's days run in order"),
    Spec("MEMORY_MAX_CONCURRENT_RUNS", integer(1, 256), 4, "runs the queued run coordinator starts at once"),
    Spec("MEMORY_EXECUTOR", choice("in_process", "multiprocess", "dask"), "in_process",
         "where a run's steps execute: its own process, a process per step, or a Dask cluster"),
    Spec("MEMORY_DASK_SCHEDULER", Kind("tcp://HOST:PORT or tls://HOST:PORT", _dask_address), None,
         "the dask.distributed scheduler the dask executor sends steps to"),
    Spec("MEMORY_API_KEY", TEXT, None, "the API key `serve mcp` acts with over stdio", secret=True),
    Spec("MEMORY_API_TIMEOUT", decimal(0, low_open=True), 30.0, "seconds one API or MCP request may take"),
    Spec("MEMORY_API_MAX_BODY_BYTES", integer(1024), 1_048_576, "largest API request body"),
    Spec("MEMORY_API_POOL_SIZE", integer(1, 100), 8, "database connections of one server process"),
]}


def raw_value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """A variable's text, None when unset or blank."""
    return ((os.environ if environ is None else environ).get(name) or "").strip() or None


@lru_cache(maxsize=512)
def _parse(name: str, text: str):
    spec = SPECS[name]
    try:
        return spec.kind.parse(text)
    except (ValueError, TypeError, OverflowError):
        shown = "(hidden)" if spec.secret else repr(mask_url(text) if "://" in text else text)
        raise ConfigError(f"{name}={shown} is not valid: expected {spec.kind.accepted}") from None


def setting(name: str, environ: Mapping[str, str] | None = None):
    """The value of a `MEMORY_*` setting: parsed by its spec, or its default when unset."""
    spec = SPECS[name]
    text = raw_value(name, environ)
    return spec.default if text is None else _parse(name, text)


def is_set(name: str) -> bool:
    return raw_value(name) is not None


def validate_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """Parse every setting; raise ConfigError with one line per bad value. Returns warnings
    for `MEMORY_*` variables no setting has (a typo would be silently ignored otherwise)."""
    environ = os.environ if environ is None else environ
    errors = []
    for name in SPECS:
        try:
            setting(name, environ)
        except ConfigError as exc:
            errors.append(str(exc))
    if not errors and setting("MEMORY_EXECUTOR", environ) == "dask" and setting("MEMORY_DASK_SCHEDULER", environ) is None:
        errors.append("MEMORY_EXECUTOR=dask needs MEMORY_DASK_SCHEDULER: the tcp://HOST:PORT of a running "
                      "`dask scheduler` (docs/operations.md, Shards and a distributed executor)")
    if errors:
        raise ConfigError("\n".join(errors))
    warnings = []
    for name in sorted(n for n in environ if n.startswith("MEMORY_") and n not in SPECS):
        close = difflib.get_close_matches(name, SPECS, n=1)
        warnings.append(f"{name} is not a memory-pipelines setting (ignored)"
                        + (f"; did you mean {close[0]}?" if close else ""))
    return warnings


def mask_url(url: str) -> str:
    """A URL with its password replaced, for display."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str | None
    transcripts: str
    timezone: str
    max_message_bytes: int
    partition_start: date | None  # None: derived (assets/partition_start.py)
    shards: int

    @classmethod
    def from_env(cls) -> "Settings":
        return cls(
            home=setting("MEMORY_HOME") or default_home(),
            database_url=setting("MEMORY_DATABASE_URL"),
            transcripts=setting("MEMORY_TRANSCRIPTS"),
            timezone=setting("MEMORY_TIMEZONE"),
            max_message_bytes=setting("MEMORY_MAX_MESSAGE_BYTES"),
            partition_start=setting("MEMORY_PARTITION_START"),
            shards=setting("MEMORY_SHARDS"),
        )


@dataclass(frozen=True)
class DecaySettings:
    """When decay may archive: only memory at least `min_age_days` old (conversation time)
    and unaccessed that long, scoring below `threshold`; facts only when `decay_facts`."""
    min_age_days: int = SPECS["MEMORY_DECAY_MIN_AGE_DAYS"].default
    threshold: float = SPECS["MEMORY_DECAY_THRESHOLD"].default
    base_rate: float = SPECS["MEMORY_DECAY_BASE_RATE"].default
    decay_facts: bool = SPECS["MEMORY_DECAY_FACTS"].default
    pii_retention_days: int = SPECS["MEMORY_PII_RETENTION_DAYS"].default

    @classmethod
    def from_env(cls) -> "DecaySettings":
        return cls(min_age_days=setting("MEMORY_DECAY_MIN_AGE_DAYS"), threshold=setting("MEMORY_DECAY_THRESHOLD"),
                   base_rate=setting("MEMORY_DECAY_BASE_RATE"), decay_facts=setting("MEMORY_DECAY_FACTS"),
                   pii_retention_days=setting("MEMORY_PII_RETENTION_DAYS"))


def context_window() -> int:
    """A session's last messages in the agent's context window (MEMORY_CONTEXT_MESSAGES):
    what `context_for` serves and what chunking leaves out until the session is stale."""
    return setting("MEMORY_CONTEXT_MESSAGES")


@dataclass(frozen=True)
class ApiSettings:
    """How `serve http` and `serve mcp` bound a request: its time, its body, the
    connections one server process holds."""
    timeout: float = SPECS["MEMORY_API_TIMEOUT"].default
    max_body_bytes: int = SPECS["MEMORY_API_MAX_BODY_BYTES"].default
    pool_size: int = SPECS["MEMORY_API_POOL_SIZE"].default

    @classmethod
    def from_env(cls) -> "ApiSettings":
        return cls(timeout=setting("MEMORY_API_TIMEOUT"), max_body_bytes=setting("MEMORY_API_MAX_BODY_BYTES"),
                   pool_size=setting("MEMORY_API_POOL_SIZE"))

"""Every `MEMORY_*` setting in one place: its type, range, default and meaning.

Each setting is declared once, in SPECS; `Settings` is generated from it. A process builds
its settings once with `load()` (the CLI, the code location, the API server, a worker) and
passes them down; a bad value fails there, with one line per bad value naming the variable,
the value and what is accepted (`ConfigError`). Settings reach a child process only by
`handed_off`.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, make_dataclass
from dataclasses import field as dataclass_field
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from memory_pipelines.records import TRANSCRIPT_FORMATS
from memory_pipelines.setting_kinds import (
    BOOLEAN, CRON, DASK_ADDRESS, DAY, HTTP_URL, NAME_MAPPING, PATH, POSTGRES_URL, PRICE_TABLE, TEXT, TRANSCRIPT_LOCATION,
    ZONE, Kind, choice, decimal, integer,
)

PACKAGE_DIR = Path(__file__).resolve().parent
SAMPLE_TRANSCRIPTS = PACKAGE_DIR / "sample_data" / "transcripts"
SAMPLE_BAD_INPUT = PACKAGE_DIR / "sample_data" / "bad_input"

LLM_BACKENDS = ("ollama", "openai", "rules")
JUDGING_SHARES = ("day", "user", "session")  # what one noise-judging call may hold
EMBED_BACKENDS = ("ollama", "openai", "local", "onnx", "model2vec", "hashing")
EMBED_PRECISIONS = ("fp32", "int8", "mixed")  # the onnx embedder's weights
LOCAL_EXTRA = "pip install 'memory-pipelines[local]'"  # what the local, onnx and model2vec embedders need
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


def embedder_cache(home: Path) -> Path:
    """MEMORY_HOME/embedders: models an embedder made from installed weights (the onnx embedder's export,
    the model2vec embedder's distilled model)."""
    return home / "embedders"




@dataclass(frozen=True)
class Spec:
    name: str
    kind: Kind
    default: object  # None: unset (or derived: see `derived`)
    help: str
    secret: bool = False
    derived: str | None = None  # where the value comes from when unset, if not `default`

    @property
    def field(self) -> str:
        """Its attribute of `Settings`: MEMORY_STALE_MINUTES is `settings.stale_minutes`."""
        return self.name.removeprefix("MEMORY_").lower()


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
         derived="onnx when the 'local' extra is installed, else hashing"),
    Spec("MEMORY_EMBED_BASE_URL", TEXT, None, "embedding server URL (local, onnx, model2vec: a model folder)",
         derived="the chat model's host when the back end is the same"),
    Spec("MEMORY_EMBED_MODEL", TEXT, None, "embedding model", derived="the back end's default"),
    Spec("MEMORY_EMBED_API_KEY", TEXT, None, "bearer token", secret=True),
    Spec("MEMORY_EMBED_DIM", integer(2, 65536), None,
         "dimension (hashing; OpenAI `dimensions`; model2vec: its PCA's, 256 unless set, at most the model's)",
         derived="the model's"),
    Spec("MEMORY_EMBED_PRECISION", choice(*EMBED_PRECISIONS), "mixed",
         "the onnx embedder's weights: mixed (int8 but the feed-forward outputs, kept fp32: fp32's recall at "
         "about 1.3x the local rate), int8 (all dynamically quantized per channel to 7 bits, so every CPU computes the "
         "same vectors: fastest, a little lower recall) or fp32 as exported"),
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
    Spec("MEMORY_DASK_SCHEDULER", DASK_ADDRESS, None,
         "the dask.distributed scheduler the dask executor sends steps to"),
    Spec("MEMORY_API_KEY", TEXT, None, "the API key `serve mcp` acts with over stdio", secret=True),
    Spec("MEMORY_API_TIMEOUT", decimal(0, low_open=True), 30.0, "seconds one API or MCP request may take"),
    Spec("MEMORY_API_MAX_BODY_BYTES", integer(1024), 1_048_576, "largest API request body"),
    Spec("MEMORY_API_POOL_SIZE", integer(1, 100), 8, "database connections of one server process"),
]}


def variable_text(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """A variable's text in `environ` (default: this process's environment), None when unset or blank."""
    return ((os.environ if environ is None else environ).get(name) or "").strip() or None


@lru_cache(maxsize=512)
def _parse(name: str, text: str):
    spec = SPECS[name]
    try:
        return spec.kind.parse(text)
    except (ValueError, TypeError, OverflowError):
        shown = "(hidden)" if spec.secret else repr(mask_url(text) if "://" in text else text)
        raise ConfigError(f"{name}={shown} is not valid: expected {spec.kind.accepted}") from None


class _Unreadable:
    """A bad value let through by a lenient `load`: reading it raises its error."""

    def __init__(self, error: ConfigError):
        self.error = error

    def __repr__(self) -> str:
        return "<unreadable>"


def _settings_methods() -> dict:
    def __getattribute__(self, name: str):  # noqa: N807 - a bad value refuses where it is read
        value = object.__getattribute__(self, name)
        if isinstance(value, _Unreadable):
            raise value.error
        return value

    def to_environ(self) -> dict[str, str]:
        """Every setting as the text of its variable (unset ones left out): what a child
        process is handed (`handed_off`)."""
        return {spec.name: spec.kind.text(value) for spec in SPECS.values()
                if (value := getattr(self, spec.field)) is not None}

    def __repr__(self) -> str:  # secrets left out, a bad value shown as such
        shown = (f"{spec.field}={object.__getattribute__(self, spec.field)!r}" for spec in SPECS.values()
                 if not spec.secret)
        return f"Settings({', '.join(shown)})"

    return {"__doc__": SETTINGS_DOC, "__getattribute__": __getattribute__, "__repr__": __repr__,
            "to_environ": to_environ}


SETTINGS_DOC = """Every setting of one process, parsed and validated: one attribute per entry of SPECS,
named after its variable (MEMORY_STALE_MINUTES is `stale_minutes`), holding its default
when unset (None: unset, or derived where it is used). Built once per process by `load`
and passed down; a command changes a field with `dataclasses.replace`."""

# Generated from SPECS, so that each setting is declared once, there.
Settings = make_dataclass(
    "Settings",
    [(spec.field, spec.kind.type if spec.default is not None else spec.kind.type | None,
      dataclass_field(default=spec.default)) for spec in SPECS.values()],
    namespace=_settings_methods(), frozen=True)
Settings.__module__ = __name__  # pickled by name: a worker process is handed its settings


def load(environ: Mapping[str, str] | None = None, *, lenient: bool = False) -> Settings:
    """The settings of `environ` (default: this process's environment), every one parsed:
    a ConfigError with one line per bad value; `lenient`, a bad value is kept unreadable
    instead (reading it raises its error; `unreadable` lists them). MEMORY_HOME unset is
    the default home."""
    environ = os.environ if environ is None else environ
    values, errors = {}, []
    for name, spec in SPECS.items():
        text = variable_text(name, environ)
        try:
            values[spec.field] = spec.default if text is None else _parse(name, text)
        except ConfigError as exc:
            values[spec.field] = _Unreadable(exc)
            errors.append(str(exc))
    if values["executor"] == "dask" and values["dask_scheduler"] is None:
        missing = ConfigError("MEMORY_EXECUTOR=dask needs MEMORY_DASK_SCHEDULER: the tcp://HOST:PORT of a running "
                              "`dask scheduler` (docs/operations.md, Shards and a distributed executor)")
        values["dask_scheduler"] = _Unreadable(missing)
        errors.append(str(missing))
    if errors and not lenient:
        raise ConfigError("\n".join(errors))
    if values["home"] is None:
        values["home"] = default_home()
    return Settings(**values)


def unreadable(settings: Settings) -> list[str]:
    """The error of each bad value a lenient `load` let through."""
    return [str(value.error) for spec in SPECS.values()
            if isinstance(value := object.__getattribute__(settings, spec.field), _Unreadable)]


def validate_environment(environ: Mapping[str, str] | None = None) -> list[str]:
    """Parse every setting: a ConfigError with one line per bad value. Returns the warnings
    for `MEMORY_*` variables no setting has."""
    load(environ)
    return unknown_settings(environ)


def unknown_settings(environ: Mapping[str, str] | None = None) -> list[str]:
    """A warning for each `MEMORY_*` variable no setting has (a typo would be silently
    ignored otherwise)."""
    environ = os.environ if environ is None else environ
    warnings = []
    for name in sorted(n for n in environ if n.startswith("MEMORY_") and n not in SPECS):
        close = difflib.get_close_matches(name, SPECS, n=1)
        warnings.append(f"{name} is not a memory-pipelines setting (ignored)"
                        + (f"; did you mean {close[0]}?" if close else ""))
    return warnings


def child_environment(settings: Settings) -> dict[str, str]:
    """This process's environment with `settings` in place of its own settings: what a
    process started here with an environment of its own is given."""
    return {k: v for k, v in os.environ.items() if k not in SPECS} | settings.to_environ()


@contextmanager
def handed_off(settings: Settings) -> Iterator[None]:
    """This process's environment holding `settings` while inside, as it was again after:
    the one way settings reach the processes it starts that load their own (Dagster's step
    processes, a shard's worker, uvicorn's workers, a Dask cluster started here), and the
    secrets Dagster resolves from the environment (`EnvVar`)."""
    saved = {name: os.environ.get(name) for name in SPECS}
    values = settings.to_environ()
    for name in SPECS:
        if name in values:
            os.environ[name] = values[name]
        else:
            os.environ.pop(name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def mask_url(url: str) -> str:
    """A URL with its password replaced, for display."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


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
    def from_settings(cls, settings: Settings) -> "DecaySettings":
        return cls(min_age_days=settings.decay_min_age_days, threshold=settings.decay_threshold,
                   base_rate=settings.decay_base_rate, decay_facts=settings.decay_facts,
                   pii_retention_days=settings.pii_retention_days)


@dataclass(frozen=True)
class ApiSettings:
    """How `serve http` and `serve mcp` bound a request: its time, its body, the
    connections one server process holds."""
    timeout: float = SPECS["MEMORY_API_TIMEOUT"].default
    max_body_bytes: int = SPECS["MEMORY_API_MAX_BODY_BYTES"].default
    pool_size: int = SPECS["MEMORY_API_POOL_SIZE"].default

    @classmethod
    def from_settings(cls, settings: Settings) -> "ApiSettings":
        return cls(timeout=settings.api_timeout, max_body_bytes=settings.api_max_body_bytes,
                   pool_size=settings.api_pool_size)

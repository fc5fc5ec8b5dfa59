"""Resources configured from environment variables (see README, Configuration)."""


import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path

import dagster as dg
import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.chunks import CONTEXT_WINDOW_MESSAGES
from memory_pipelines.config import SAMPLE_TRANSCRIPTS, default_home
from memory_pipelines.db import repository
from memory_pipelines.db.connection import get_pool, resolve_url
from memory_pipelines.embed import EmbedConfig, Embedder, build_embedder, embed_config
from memory_pipelines.llm import ModelBackend, ModelConfig, build_backend
from memory_pipelines.llm.config import DEFAULT_MODELS, chat_config, decision_config
from memory_pipelines.summaries import SUMMARY_CHUNK_CHARS


class PostgresResource(dg.ConfigurableResource):
    """PostgreSQL with pgvector: `database_url`, or the embedded server under `home`."""

    database_url: str | None = None
    home: str = str(default_home())

    def url(self) -> str:
        return resolve_url(self.database_url, Path(self.home))

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        with get_pool(self.url()).connection() as conn:
            yield conn


class TranscriptSource(dg.ConfigurableResource):
    """Where transcript files are read from, and how their records are interpreted."""

    path: str = str(SAMPLE_TRANSCRIPTS)
    timezone: str = "UTC"
    max_message_bytes: int = 1_000_000


def _env_or(name: str, default):
    """An `EnvVar` when the variable is set (so Dagster shows where a value came from)."""
    return dg.EnvVar(name) if os.environ.get(name, "").strip() else default


class ModelResource(dg.ConfigurableResource):
    """A model back end: `ollama`, `openai` (any OpenAI-compatible server) or `rules`
    (deterministic, offline). Built once per run and closed after it."""

    backend: str = "rules"
    base_url: str = ""
    model: str = DEFAULT_MODELS["rules"]
    api_key: str | None = None
    timeout_s: float = 120.0
    retries: int = 3
    backoff_s: float = 1.0
    concurrency: int = 1
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    token_budget: int = 0
    batch_tokens: int = 8000

    @classmethod
    def from_config(cls, config: ModelConfig, *api_key_vars: str) -> "ModelResource":
        # The key stays an EnvVar, so Dagster never shows or stores its value.
        set_vars = [v for v in api_key_vars if os.environ.get(v, "").strip()]
        api_key = dg.EnvVar(set_vars[0]) if config.api_key and set_vars else None
        return cls(**{**asdict(config), "api_key": api_key})

    def config(self) -> ModelConfig:
        return ModelConfig(**{f.name: getattr(self, f.name) for f in fields(ModelConfig)})

    @contextmanager
    def backend_for_run(self, pool: ConnectionPool, run_id: str) -> Iterator[ModelBackend]:
        """The back end for one run; the token budget counts what this run already spent."""
        backend = build_backend(self.config(), lambda: repository.run_tokens_spent(pool, run_id))
        try:
            yield backend
        finally:
            backend.close()


class SummarySettings(dg.ConfigurableResource):
    """How summaries are written: reply language (`auto` follows the conversation) and
    the size of the transcript chunk one summary call reads."""

    language: str = "auto"
    chunk_chars: int = SUMMARY_CHUNK_CHARS


class MemorySettings(dg.ConfigurableResource):
    """When a session counts as stale (extracted, fully chunked) and how many of its last
    messages stay in the context window (not chunked yet)."""

    stale_minutes: int = 30
    context_messages: int = CONTEXT_WINDOW_MESSAGES


class EmbedderResource(dg.ConfigurableResource):
    """The embedding back end (MEMORY_EMBED_*), configured apart from the chat model."""

    backend: str = "hashing"
    base_url: str = ""
    model: str = "hashing-v1"
    api_key: str | None = None
    dimension: int | None = None
    batch_size: int = 64
    pause_s: float = 0.0
    timeout_s: float = 120.0
    retries: int = 3
    backoff_s: float = 1.0

    @classmethod
    def from_config(cls, config: EmbedConfig) -> "EmbedderResource":
        key_set = os.environ.get("MEMORY_EMBED_API_KEY", "").strip()
        return cls(**{**asdict(config), "api_key": dg.EnvVar("MEMORY_EMBED_API_KEY") if key_set else None})

    @contextmanager
    def embedder_for_run(self) -> Iterator[Embedder]:
        embedder = build_embedder(EmbedConfig(**{f.name: getattr(self, f.name) for f in fields(EmbedConfig)}))
        try:
            yield embedder
        finally:
            embedder.close()


class LifecycleSettings(dg.ConfigurableResource):
    """Knowledge entries and decay: PII sanitizing, a default TTL and consent basis for new
    entries, the decay base rate (per hour), archive threshold and PII retention."""

    sanitize_pii: bool = True
    entry_ttl_seconds: int | None = None
    consent_basis: str = "not_set"
    decay_base_rate: float = 0.001
    decay_threshold: float = 0.5
    pii_retention_days: int = 180


def resources_from_env() -> dict[str, dg.ConfigurableResource]:
    max_bytes = dg.EnvVar.int("MEMORY_MAX_MESSAGE_BYTES") if os.environ.get("MEMORY_MAX_MESSAGE_BYTES") else 1_000_000
    chunk = dg.EnvVar.int("MEMORY_SUMMARY_CHUNK_CHARS") if os.environ.get("MEMORY_SUMMARY_CHUNK_CHARS") else SUMMARY_CHUNK_CHARS
    return {
        "llm": ModelResource.from_config(chat_config(), "MEMORY_LLM_API_KEY"),
        "embedder": EmbedderResource.from_config(embed_config()),
        "lifecycle": LifecycleSettings(
            sanitize_pii=os.environ.get("MEMORY_PII_SANITIZE", "1").strip().lower() not in ("0", "false", "no", "off"),
            entry_ttl_seconds=int(os.environ["MEMORY_ENTRY_TTL_SECONDS"]) if os.environ.get("MEMORY_ENTRY_TTL_SECONDS")
            else None,
            consent_basis=_env_or("MEMORY_CONSENT_BASIS", "not_set"),
            decay_base_rate=float(os.environ.get("MEMORY_DECAY_BASE_RATE") or 0.001),
            decay_threshold=float(os.environ.get("MEMORY_DECAY_THRESHOLD") or 0.5),
            pii_retention_days=int(os.environ.get("MEMORY_PII_RETENTION_DAYS") or 180),
        ),
        "decision": ModelResource.from_config(decision_config(), "MEMORY_DECISION_API_KEY", "MEMORY_LLM_API_KEY"),
        "summary_settings": SummarySettings(language=_env_or("MEMORY_SUMMARY_LANGUAGE", "auto"), chunk_chars=chunk),
        "memory_settings": MemorySettings(
            stale_minutes=dg.EnvVar.int("MEMORY_STALE_MINUTES") if os.environ.get("MEMORY_STALE_MINUTES") else 30,
            context_messages=(dg.EnvVar.int("MEMORY_CONTEXT_MESSAGES") if os.environ.get("MEMORY_CONTEXT_MESSAGES")
                              else CONTEXT_WINDOW_MESSAGES),
        ),
        "postgres": PostgresResource(
            database_url=_env_or("MEMORY_DATABASE_URL", None),
            home=_env_or("MEMORY_HOME", str(default_home())),
        ),
        "transcript_source": TranscriptSource(
            path=_env_or("MEMORY_TRANSCRIPTS", str(SAMPLE_TRANSCRIPTS)),
            timezone=_env_or("MEMORY_TIMEZONE", "UTC"),
            max_message_bytes=max_bytes,
        ),
    }

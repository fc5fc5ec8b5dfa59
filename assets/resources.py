"""The Dagster resources, built from the process's settings (`resources_from`)."""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path

import dagster as dg
import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.config import SPECS, DecaySettings, Settings, default_home
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.db.connection import get_pool, resolve_url
from memory_pipelines.embed import EmbedConfig, Embedder, build_embedder, embed_config
from memory_pipelines.llm import ModelBackend, ModelConfig, build_backend
from memory_pipelines.llm.config import chat_config, decision_config
from memory_pipelines.llm.probe import ModelServer, ModelServerUnreachable, model_server, probe
from memory_pipelines.sources import SourceSettings


def unreachable_fails(server: ModelServer | None) -> None:
    """A step's failure, not retried, when its model server does not answer: retries of a
    dead server only add minutes before the same failure."""
    try:
        probe([server])
    except ModelServerUnreachable as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None


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


class TranscriptSourceResource(dg.ConfigurableResource):
    """Where transcripts are read from (a folder or file, s3://bucket/prefix, postgresql://…?table=),
    and how their records are interpreted (memory_pipelines.sources.SourceSettings)."""

    location: str = SourceSettings.location
    timezone: str = SourceSettings.timezone
    max_message_bytes: int = SourceSettings.max_message_bytes
    format: str = SourceSettings.format
    fields: dict[str, str] = {}
    source_user: str | None = None
    s3_endpoint_url: str | None = None
    columns: dict[str, str] = {}
    batch_rows: int = SourceSettings.batch_rows
    cache_mb: int = SourceSettings.cache_mb

    @classmethod
    def from_settings(cls, settings: SourceSettings) -> "TranscriptSourceResource":
        return cls(**asdict(settings))

    def settings(self) -> SourceSettings:
        return SourceSettings(**{f.name: getattr(self, f.name) for f in fields(SourceSettings)})


class ModelResource(dg.ConfigurableResource):
    """A model back end: `ollama`, `openai` (any OpenAI-compatible server) or `rules`
    (deterministic, offline). Built once per run and closed after it."""

    backend: str = ModelConfig.backend
    base_url: str = ModelConfig.base_url
    model: str = ModelConfig.model
    api_key: str | None = None
    timeout_s: float = ModelConfig.timeout_s
    retries: int = ModelConfig.retries
    backoff_s: float = ModelConfig.backoff_s
    concurrency: int = ModelConfig.concurrency
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    token_budget: int = ModelConfig.token_budget
    batch_tokens: int = ModelConfig.batch_tokens
    share: str = ModelConfig.share
    max_output_tokens: int = ModelConfig.max_output_tokens
    # the settings that configure it (MEMORY_LLM or MEMORY_DECISION), for failure messages
    settings_prefix: str = "MEMORY_LLM"

    @classmethod
    def from_config(cls, config: ModelConfig, prefix: str, settings: Settings, *key_settings: str) -> "ModelResource":
        # The key stays an EnvVar, so Dagster never shows or stores its value.
        named = [name for name in key_settings if getattr(settings, SPECS[name].field)]
        api_key = dg.EnvVar(named[0]) if config.api_key and named else None
        return cls(**{**asdict(config), "api_key": api_key, "settings_prefix": prefix})

    def config(self) -> ModelConfig:
        return ModelConfig(**{f.name: getattr(self, f.name) for f in fields(ModelConfig)})

    @contextmanager
    def backend_for_run(self, pool: ConnectionPool, run_id: str) -> Iterator[ModelBackend]:
        """The back end for one run, once its server answered; the token budget counts what
        this run already spent. A dead server fails the step at once, without retries."""
        unreachable_fails(model_server(self.backend, self.base_url, self.settings_prefix, "rules"))
        backend = build_backend(self.config(), lambda: summaries_db.run_tokens_spent(pool, run_id))
        try:
            yield backend
        finally:
            backend.close()


class SummarySettings(dg.ConfigurableResource):
    """How summaries are written: reply language (`auto` follows the conversation) and
    the size of the transcript chunk one summary call reads."""

    language: str = SPECS["MEMORY_SUMMARY_LANGUAGE"].default
    chunk_chars: int = SPECS["MEMORY_SUMMARY_CHUNK_CHARS"].default


class MemorySettings(dg.ConfigurableResource):
    """When a session counts as stale (extracted, fully chunked) and how many of its last
    messages stay in the context window (not chunked yet)."""

    stale_minutes: int = SPECS["MEMORY_STALE_MINUTES"].default
    context_messages: int = SPECS["MEMORY_CONTEXT_MESSAGES"].default


class EmbedderResource(dg.ConfigurableResource):
    """The embedding back end (MEMORY_EMBED_*), configured apart from the chat model."""

    backend: str = EmbedConfig.backend
    base_url: str = EmbedConfig.base_url
    model: str = EmbedConfig.model
    api_key: str | None = None
    dimension: int | None = None
    batch_size: int = EmbedConfig.batch_size
    pause_s: float = EmbedConfig.pause_s
    timeout_s: float = EmbedConfig.timeout_s
    retries: int = EmbedConfig.retries
    backoff_s: float = EmbedConfig.backoff_s
    precision: str = EmbedConfig.precision
    cache_dir: str = EmbedConfig.cache_dir

    @classmethod
    def from_config(cls, config: EmbedConfig) -> "EmbedderResource":
        return cls(**{**asdict(config), "api_key": dg.EnvVar("MEMORY_EMBED_API_KEY") if config.api_key else None})

    @contextmanager
    def embedder_for_run(self) -> Iterator[Embedder]:
        unreachable_fails(model_server(self.backend, self.base_url, "MEMORY_EMBED", "hashing"))
        embedder = build_embedder(EmbedConfig(**{f.name: getattr(self, f.name) for f in fields(EmbedConfig)}))
        try:
            yield embedder
        finally:
            embedder.close()


class LifecycleSettings(dg.ConfigurableResource):
    """Knowledge entries and decay: PII sanitizing, a default TTL and consent basis for new
    entries; when decay may archive (minimum age and disuse, threshold, base rate per hour,
    whether facts decay) and PII retention."""

    sanitize_pii: bool = SPECS["MEMORY_PII_SANITIZE"].default
    entry_ttl_seconds: int | None = None
    consent_basis: str = SPECS["MEMORY_CONSENT_BASIS"].default
    decay_min_age_days: int = DecaySettings.min_age_days
    decay_threshold: float = DecaySettings.threshold
    decay_base_rate: float = DecaySettings.base_rate
    decay_facts: bool = DecaySettings.decay_facts
    pii_retention_days: int = DecaySettings.pii_retention_days

    def decay(self) -> DecaySettings:
        return DecaySettings(min_age_days=self.decay_min_age_days, threshold=self.decay_threshold,
                             base_rate=self.decay_base_rate, decay_facts=self.decay_facts,
                             pii_retention_days=self.pii_retention_days)


def resources_from(settings: Settings) -> dict[str, dg.ConfigurableResource]:
    """Every resource from the process's validated settings (`memory_pipelines.config.load`):
    a bad value failed there with one line naming it, never as a Dagster config error.
    Secrets stay `EnvVar`s, so Dagster never shows or stores them; a process running the
    assets has them in its environment (`handed_off`)."""
    decay = DecaySettings.from_settings(settings)
    return {
        "llm": ModelResource.from_config(chat_config(settings), "MEMORY_LLM", settings, "MEMORY_LLM_API_KEY"),
        "embedder": EmbedderResource.from_config(embed_config(settings)),
        "lifecycle": LifecycleSettings(
            sanitize_pii=settings.pii_sanitize, entry_ttl_seconds=settings.entry_ttl_seconds,
            consent_basis=settings.consent_basis, decay_min_age_days=decay.min_age_days,
            decay_threshold=decay.threshold, decay_base_rate=decay.base_rate, decay_facts=decay.decay_facts,
            pii_retention_days=decay.pii_retention_days,
        ),
        "decision": ModelResource.from_config(decision_config(settings), "MEMORY_DECISION", settings,
                                              "MEMORY_DECISION_API_KEY", "MEMORY_LLM_API_KEY"),
        "summary_settings": SummarySettings(language=settings.summary_language,
                                            chunk_chars=settings.summary_chunk_chars),
        "memory_settings": MemorySettings(stale_minutes=settings.stale_minutes,
                                          context_messages=settings.context_messages),
        "postgres": PostgresResource(database_url=dg.EnvVar("MEMORY_DATABASE_URL") if settings.database_url else None,
                                     home=str(settings.home)),
        "transcript_source": TranscriptSourceResource.from_settings(SourceSettings.from_settings(settings)),
    }

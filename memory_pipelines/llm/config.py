"""Model back-end settings, from the process's settings (`memory_pipelines.config.Settings`).

The chat model is `MEMORY_LLM_*`; the decision model (noise judgement, overturned
entries, relevance) is `MEMORY_DECISION_*`, whose unset fields fall back to the chat
model's except the back end itself, which defaults to `rules`.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_pipelines.config import LLM_BACKENDS as BACKENDS
from memory_pipelines.config import JUDGING_SHARES, SPECS, ConfigError, Settings
from memory_pipelines.llm.pricing import Price, configured_price

DEFAULT_MODELS = {"ollama": "llama3.1:8b", "openai": "gpt-4o-mini", "rules": "rules-v1"}
DEFAULT_URLS = {"ollama": "http://127.0.0.1:11434", "openai": "https://api.openai.com/v1", "rules": ""}


# the settings suffix (MEMORY_LLM_<suffix>, MEMORY_DECISION_<suffix>) of each field
FIELD_BY_SUFFIX = {"BACKEND": "backend", "BASE_URL": "base_url", "MODEL": "model", "API_KEY": "api_key",
                   "TIMEOUT": "timeout_s", "RETRIES": "retries", "BACKOFF": "backoff_s",
                   "CONCURRENCY": "concurrency", "BATCH_TOKENS": "batch_tokens", "SHARE": "share",
                   "MAX_OUTPUT_TOKENS": "max_output_tokens"}


@dataclass(frozen=True)
class ModelConfig:
    backend: str = "rules"
    base_url: str = ""
    model: str = DEFAULT_MODELS["rules"]
    api_key: str | None = None
    timeout_s: float = SPECS["MEMORY_LLM_TIMEOUT"].default
    retries: int = SPECS["MEMORY_LLM_RETRIES"].default
    backoff_s: float = SPECS["MEMORY_LLM_BACKOFF"].default
    concurrency: int = SPECS["MEMORY_LLM_CONCURRENCY"].default
    # US dollars per million tokens, from the price table; None: not priced
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    # the most tokens one run may spend on model calls, every back end counted; 0: no limit
    token_budget: int = SPECS["MEMORY_RUN_TOKEN_BUDGET"].default
    # prompt tokens (estimated) of one call that judges several sessions' segments; 0: a call per session
    batch_tokens: int = SPECS["MEMORY_LLM_BATCH_TOKENS"].default
    # whose sessions one judging call may hold: a day's of any users, one user's, or one session
    share: str = SPECS["MEMORY_LLM_SHARE"].default
    # the most tokens one answer may have: a small model's runaway answer ends there (and is
    # then not valid JSON: asked again once, then failed) instead of at the timeout
    max_output_tokens: int = SPECS["MEMORY_LLM_MAX_OUTPUT_TOKENS"].default

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"model back end must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.timeout_s <= 0 or self.retries < 0 or self.concurrency < 1 or self.backoff_s < 0:
            raise ConfigError("model timeout must be > 0, retries >= 0, backoff >= 0, concurrency >= 1")
        if self.batch_tokens < 0:
            raise ConfigError("model BATCH_TOKENS must be >= 0 (0: one session per call)")
        if self.max_output_tokens < 16:
            raise ConfigError("model MAX_OUTPUT_TOKENS must be >= 16")
        if self.share not in JUDGING_SHARES:
            raise ConfigError(f"model SHARE must be one of {', '.join(JUDGING_SHARES)}, got {self.share!r}")
        if self.token_budget < 0:
            raise ConfigError("MEMORY_RUN_TOKEN_BUDGET must be >= 0 (0: no limit)")

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float | None:
        if self.backend == "rules":
            return 0.0
        if self.input_usd_per_mtok is None or self.output_usd_per_mtok is None:
            return None
        return Price(self.input_usd_per_mtok, self.output_usd_per_mtok).cost(input_tokens, output_tokens)

    @classmethod
    def from_settings(cls, settings: Settings, prefix: str = "MEMORY_LLM",
                      fallback: "ModelConfig | None" = None) -> "ModelConfig":
        def value_of(suffix: str):
            return getattr(settings, SPECS[f"{prefix}_{suffix}"].field)

        def get(name: str):
            # unset: the chat model's value (the decision model), else the default
            value = value_of(name)
            return getattr(fallback or cls(), FIELD_BY_SUFFIX[name]) if value is None else value

        backend = value_of("BACKEND")
        base = fallback if fallback is not None and fallback.backend == backend else None
        model = value_of("MODEL") or (base.model if base else DEFAULT_MODELS[backend])
        price = configured_price(settings.price_table, backend, model)
        return cls(
            backend=backend,
            base_url=value_of("BASE_URL") or (base.base_url if base else DEFAULT_URLS[backend]),
            model=model,
            api_key=value_of("API_KEY") or (base.api_key if base else None),
            timeout_s=get("TIMEOUT"),
            retries=get("RETRIES"),
            backoff_s=get("BACKOFF"),
            concurrency=get("CONCURRENCY"),
            input_usd_per_mtok=price.input_usd_per_mtok if price else None,
            output_usd_per_mtok=price.output_usd_per_mtok if price else None,
            token_budget=settings.run_token_budget,
            batch_tokens=get("BATCH_TOKENS"),
            share=get("SHARE"),
            max_output_tokens=get("MAX_OUTPUT_TOKENS"),
        )


def chat_config(settings: Settings) -> ModelConfig:
    return ModelConfig.from_settings(settings, "MEMORY_LLM")


def decision_config(settings: Settings) -> ModelConfig:
    return ModelConfig.from_settings(settings, "MEMORY_DECISION", fallback=chat_config(settings))

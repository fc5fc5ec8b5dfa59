"""Model back-end settings from environment variables.

The chat model is `MEMORY_LLM_*`; the decision model (noise judgement, overturned
entries, relevance) is `MEMORY_DECISION_*`, whose unset fields fall back to the chat
model's except the back end itself, which defaults to `rules`.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_pipelines.config import ConfigError, env_number, env_text
from memory_pipelines.llm.pricing import Price, configured_price

BACKENDS = ("ollama", "openai", "rules")
DEFAULT_MODELS = {"ollama": "llama3.1:8b", "openai": "gpt-4o-mini", "rules": "rules-v1"}
DEFAULT_URLS = {"ollama": "http://127.0.0.1:11434", "openai": "https://api.openai.com/v1", "rules": ""}


@dataclass(frozen=True)
class ModelConfig:
    backend: str = "rules"
    base_url: str = ""
    model: str = DEFAULT_MODELS["rules"]
    api_key: str | None = None
    timeout_s: float = 120.0
    retries: int = 3
    backoff_s: float = 1.0
    concurrency: int = 1
    # US dollars per million tokens, from the price table; None: not priced
    input_usd_per_mtok: float | None = None
    output_usd_per_mtok: float | None = None
    # the most tokens one run may spend on model calls, every back end counted; 0: no limit
    token_budget: int = 0
    # prompt tokens (estimated) of one call that judges several sessions' segments; 0: a call per session
    batch_tokens: int = 8000

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"model back end must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.timeout_s <= 0 or self.retries < 0 or self.concurrency < 1 or self.backoff_s < 0:
            raise ConfigError("model timeout must be > 0, retries >= 0, backoff >= 0, concurrency >= 1")
        if self.batch_tokens < 0:
            raise ConfigError("model BATCH_TOKENS must be >= 0 (0: one session per call)")
        if self.token_budget < 0:
            raise ConfigError("MEMORY_RUN_TOKEN_BUDGET must be >= 0 (0: no limit)")

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float | None:
        if self.backend == "rules":
            return 0.0
        if self.input_usd_per_mtok is None or self.output_usd_per_mtok is None:
            return None
        return Price(self.input_usd_per_mtok, self.output_usd_per_mtok).cost(input_tokens, output_tokens)

    @classmethod
    def from_env(cls, prefix: str = "MEMORY_LLM", fallback: "ModelConfig | None" = None,
                 default_backend: str = "rules") -> "ModelConfig":
        def get(name: str) -> str | None:
            return env_text(f"{prefix}_{name}")

        def number(name: str, kind, default):
            return env_number(f"{prefix}_{name}", kind, default)

        backend = (get("BACKEND") or default_backend).lower()
        base = fallback if fallback is not None and fallback.backend == backend else None
        inherited = fallback or cls()
        model = get("MODEL") or (base.model if base else DEFAULT_MODELS.get(backend, ""))
        price = configured_price(backend, model)
        return cls(
            backend=backend,
            base_url=(get("BASE_URL") or (base.base_url if base else DEFAULT_URLS.get(backend, ""))).rstrip("/"),
            model=model,
            api_key=get("API_KEY") or (base.api_key if base else None),
            timeout_s=number("TIMEOUT", float, inherited.timeout_s),
            retries=number("RETRIES", int, inherited.retries),
            backoff_s=number("BACKOFF", float, inherited.backoff_s),
            concurrency=number("CONCURRENCY", int, inherited.concurrency),
            input_usd_per_mtok=price.input_usd_per_mtok if price else None,
            output_usd_per_mtok=price.output_usd_per_mtok if price else None,
            token_budget=env_number("MEMORY_RUN_TOKEN_BUDGET", int, 0),
            batch_tokens=number("BATCH_TOKENS", int, inherited.batch_tokens),
        )


def chat_config() -> ModelConfig:
    return ModelConfig.from_env("MEMORY_LLM")


def decision_config() -> ModelConfig:
    return ModelConfig.from_env("MEMORY_DECISION", fallback=chat_config())

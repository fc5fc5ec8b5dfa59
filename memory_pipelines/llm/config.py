"""Model back-end settings from environment variables.

The chat model is `MEMORY_LLM_*`; the decision model (noise judgement, overturned
entries, relevance) is `MEMORY_DECISION_*`, whose unset fields fall back to the chat
model's except the back end itself, which defaults to `rules`.
"""

from __future__ import annotations

from dataclasses import dataclass

from memory_pipelines.config import ConfigError, env_number, env_text

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

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"model back end must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        if self.timeout_s <= 0 or self.retries < 0 or self.concurrency < 1 or self.backoff_s < 0:
            raise ConfigError("model timeout must be > 0, retries >= 0, backoff >= 0, concurrency >= 1")

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
        return cls(
            backend=backend,
            base_url=(get("BASE_URL") or (base.base_url if base else DEFAULT_URLS.get(backend, ""))).rstrip("/"),
            model=get("MODEL") or (base.model if base else DEFAULT_MODELS.get(backend, "")),
            api_key=get("API_KEY") or (base.api_key if base else None),
            timeout_s=number("TIMEOUT", float, inherited.timeout_s),
            retries=number("RETRIES", int, inherited.retries),
            backoff_s=number("BACKOFF", float, inherited.backoff_s),
            concurrency=number("CONCURRENCY", int, inherited.concurrency),
        )


def chat_config() -> ModelConfig:
    return ModelConfig.from_env("MEMORY_LLM")


def decision_config() -> ModelConfig:
    return ModelConfig.from_env("MEMORY_DECISION", fallback=chat_config())

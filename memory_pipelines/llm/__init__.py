"""Model back ends: one interface (`ModelBackend`), swappable implementations.

`ollama` and `openai` send prompts over HTTP; `rules` is the deterministic offline back
end that answers the same tasks with heuristics, so the whole pipeline runs without a
model server.
"""

from memory_pipelines.llm.backends import ModelBackend, ModelCall, ModelError, build_backend
from memory_pipelines.llm.config import ModelConfig

__all__ = ["ModelBackend", "ModelCall", "ModelConfig", "ModelError", "build_backend"]

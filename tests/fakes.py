"""The model server tests point the pipeline at: the package's instant wire-level server."""

from memory_pipelines.llm.instant_server import Fault, InstantModelServer, Request, default_answer

FakeModelServer = InstantModelServer

__all__ = ["FakeModelServer", "Fault", "Request", "default_answer"]

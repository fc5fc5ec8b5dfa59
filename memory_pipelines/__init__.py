"""memory_pipelines: the domain library behind the Dagster code location in `assets/`.

Stages are pure functions over frozen dataclasses; `memory_pipelines.db` is the only
place that talks to PostgreSQL. Nothing in this package imports dagster except the
CLI's `run` and `ui` commands, which hand over to the code location.
"""

__version__ = "0.1.0"

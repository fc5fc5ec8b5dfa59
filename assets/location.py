"""The code location's settings: one `Settings` per process, loaded when the assets are first
defined (`dagster dev`, a run's step process, a Dask worker), or handed over by the process
that runs them (`memory-pipelines run`, a benchmark, a shard's worker process) before it
imports them. What shapes the definitions (partitions, retries, automation) is read from
here, once; everything else reaches the assets through their resources."""

from __future__ import annotations

from memory_pipelines.config import Settings, load

# the fields the asset definitions are built from when their modules are imported
DEFINING = ("shards", "partition_start", "retry_max", "retry_delay", "schedule_cron", "automation")

_settings: Settings | None = None


def location_settings() -> Settings:
    """This process's settings for the code location, loaded from its environment on first use."""
    global _settings
    if _settings is None:
        _settings = load()
    return _settings


def use_settings(settings: Settings) -> None:
    """Define the assets from `settings`: called before they are imported. Once they are,
    settings that would define them otherwise are refused (their partitions are fixed)."""
    global _settings
    if _settings is not None:
        differing = [name for name in DEFINING if getattr(_settings, name) != getattr(settings, name)]
        if differing:
            raise RuntimeError(f"the assets are already defined in this process with other {', '.join(differing)}")
    _settings = settings

"""The code location: `dagster dev -w workspace.yaml` loads `defs` from here."""

import dagster as dg

from assets.automation import build_automation
from assets.distillation import conversation_segments, session_summaries
from assets.embeddings import memory_embeddings
from assets.ingestion import transcripts
from assets.knowledge import error_memory, knowledge_entries, memory_decay
from assets.memory import memory_chunks, memory_facts, memory_tree, memory_turns, sketches
from assets.location import location_settings
from assets.resources import resources_from
from memory_pipelines.config import Settings, load

all_assets = [
    transcripts, conversation_segments, session_summaries, memory_facts, memory_chunks, sketches, knowledge_entries,
    error_memory, memory_turns, memory_tree, memory_embeddings, memory_decay,
]

distill_job = dg.define_asset_job(
    "distill",
    selection=dg.AssetSelection.all(),
    description="The whole distillation graph, for one partition or a range.",
)

distill_schedule, transcript_files_sensor = build_automation(distill_job)


def run_executor(settings: Settings) -> dg.ExecutorDefinition:
    """Where a run's steps execute (MEMORY_EXECUTOR). In its own process by default: a
    stage's step takes well under the seconds a fresh step process needs to import Dagster
    and great-expectations, and the graph is mostly a chain. `multiprocess` runs a step per
    process on this host; `dask` sends each step to a worker of the dask.distributed
    scheduler at MEMORY_DASK_SCHEDULER (each worker builds the resources from its own
    environment: nothing holding a connection is pickled). docs/operations.md has more."""
    if settings.executor == "dask":
        from assets.run.dask_executor import dask_executor

        return dask_executor.configured({"address": settings.dask_scheduler}, name="dask")
    return dg.multiprocess_executor if settings.executor == "multiprocess" else dg.in_process_executor


def build_definitions(settings: Settings) -> dg.Definitions:
    return dg.Definitions(
        assets=all_assets,
        jobs=[distill_job],
        schedules=[distill_schedule],
        sensors=[transcript_files_sensor],
        resources=resources_from(settings),
        executor=run_executor(settings),
    )


defs = build_definitions(location_settings())


def location_distill_job() -> dg.JobDefinition:
    """The distill job of a run whose steps other processes rebuild it in, from the settings
    handed to them (`dg.reconstructable` needs a module-level function)."""
    return build_definitions(load()).resolve_job_def("distill")

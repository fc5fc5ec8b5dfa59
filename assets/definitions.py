"""The code location: `dagster dev -w workspace.yaml` loads `defs` from here."""

import dagster as dg

from assets.automation import build_automation
from assets.distillation import conversation_segments, session_summaries
from assets.lifecycle import error_memory, knowledge_entries, memory_decay
from assets.memory import memory_chunks, memory_facts
from assets.resources import resources_from_env
from assets.search_assets import memory_embeddings, memory_tree, memory_turns, sketches
from assets.transcripts import transcripts

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

defs = dg.Definitions(
    assets=all_assets,
    jobs=[distill_job],
    schedules=[distill_schedule],
    sensors=[transcript_files_sensor],
    resources=resources_from_env(),
    # Steps run one after another in the run's own process: a stage's step takes well under
    # the seconds a fresh step process needs to import Dagster and great-expectations, and
    # the graph is mostly a chain. docs/operations.md says how to fan steps out instead.
    executor=dg.in_process_executor,
)

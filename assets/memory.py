"""Assets `memory_facts` (with memory_summary and session_memory_state) and `memory_chunks`."""

from collections.abc import Iterator
from datetime import timedelta

import dagster as dg

from assets.asset_checks import quality_check_specs
from assets.materialization import guarded_step, stage_results, stage_window
from assets.partitions import DAILY_ASSET
from assets.resources import MemorySettings, ModelResource, PostgresResource
from memory_pipelines.db.connection import get_pool
from memory_pipelines.stages import chunks, facts
from memory_pipelines.stages.common import Backends


@dg.asset(
    **DAILY_ASSET,
    deps=["transcripts", "conversation_segments", "session_summaries"],
    check_specs=quality_check_specs("memory_facts"),
    group_name="memory",
    kinds={"postgres"},
    tags={"stage": "extract"},
    description=(
        "Facts about each user from stale sessions (no activity for 30 minutes before the partition's "
        "end, never extracted or extracted before their last activity), as the distillation calls of "
        "their summaries' chunks wrote them (no model call here), with noise left out; a session whose "
        "summary does not reach its last reply yet waits. Items are validated one by one; invalid "
        "ones go to memory_fact_rejections. Upsert by "
        "(user, category, key) where the newest observation in conversation time wins; re-spelled "
        "keys are merged (the older row hidden via merged_into); the session is marked extracted in "
        "session_memory_state. Then each touched user's memory_summary is rewritten, once a run, when "
        "their facts changed."
    ),
)
@guarded_step
def memory_facts(
    context: dg.AssetExecutionContext, postgres: PostgresResource, llm: ModelResource,
    memory_settings: MemorySettings,
) -> Iterator:
    pool = get_pool(postgres.url())
    settings = facts.Settings(timedelta(minutes=memory_settings.stale_minutes), llm.concurrency)
    with llm.backend_for_run(pool, context.run_id) as writer:  # for memory_summary
        report = facts.run(pool, stage_window(context), settings, Backends(writer=writer))
    yield from stage_results(context, postgres, report)


@dg.asset(
    **DAILY_ASSET,
    deps=["transcripts", "session_summaries"],
    check_specs=quality_check_specs("memory_chunks"),
    group_name="memory",
    kinds={"postgres"},
    tags={"stage": "chunk"},
    description=(
        "The verbatim archive search reads: every message that left a session's context window (older "
        "than its last 16; all of them once the session is stale) packed into chunks of up to 4,000 "
        "characters with their seq span, times, sha256 and breadcrumbs (the summary's keys plus a "
        "deterministic extractor). Append-only; packing the same range twice is a no-op."
    ),
)
@guarded_step
def memory_chunks(
    context: dg.AssetExecutionContext, postgres: PostgresResource, memory_settings: MemorySettings,
) -> Iterator:
    settings = chunks.Settings(timedelta(minutes=memory_settings.stale_minutes), memory_settings.context_messages)
    report = chunks.run(get_pool(postgres.url()), stage_window(context), settings)
    yield from stage_results(context, postgres, report)

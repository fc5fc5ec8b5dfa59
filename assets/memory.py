"""The memory group: assets `memory_facts` (with memory_summary and session_memory_state),
`memory_chunks`, and `sketches`, `memory_turns` and `memory_tree`, what the query module reads
besides facts and chunks."""

from collections.abc import Iterator
from datetime import timedelta

import dagster as dg

from assets.asset_checks import quality_check_specs
from assets.materialization import guarded_step, stage_results, stage_window
from assets.partitions import DAILY_ASSET
from assets.resources import MemorySettings, ModelResource, PostgresResource
from memory_pipelines.db.connection import get_pool
from memory_pipelines.stages import chunks, facts, sketches as sketch_stage, tree, turns
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


@dg.asset(
    **DAILY_ASSET,
    deps=["transcripts"],
    check_specs=quality_check_specs("sketches"),
    group_name="memory",
    kinds={"postgres"},
    tags={"stage": "sketch"},
    description=(
        "Each session's working notes: the scratchpad tool's writes found in the transcripts, by "
        "(section, key) and scope (session or user), updated in place, the newest write winning. Also "
        "writable through the query module (`memory_pipelines.search.write_sketch`)."
    ),
)
@guarded_step
def sketches(context: dg.AssetExecutionContext, postgres: PostgresResource) -> Iterator:
    report = sketch_stage.run(get_pool(postgres.url()), stage_window(context))
    yield from stage_results(context, postgres, report)


@dg.asset(
    **DAILY_ASSET,
    deps=["transcripts", "session_summaries", "memory_chunks"],
    check_specs=quality_check_specs("memory_turns"),
    group_name="memory",
    kinds={"postgres"},
    tags={"stage": "index"},
    description=(
        "The turn-level index search serves passages from: every user, assistant and tool message (a tool "
        "result capped at 2,000 characters), with its session's language (english, german, spanish, french, "
        "... else simple) stemmed into lexemes with positions for BM25, the breadcrumbs and summary keys it "
        "holds as extra keys, its neighbours' order, and per-user corpus statistics (memory_turn_stats). "
        "Each session is indexed as it is now, so any day in any order leaves the same rows."
    ),
)
@guarded_step
def memory_turns(context: dg.AssetExecutionContext, postgres: PostgresResource) -> Iterator:
    report = turns.run(get_pool(postgres.url()), stage_window(context))
    yield from stage_results(context, postgres, report)


@dg.asset(
    **DAILY_ASSET,
    deps=["memory_chunks", "memory_facts", "knowledge_entries"],
    check_specs=quality_check_specs("memory_tree"),
    group_name="memory",
    kinds={"postgres"},
    tags={"stage": "tree"},
    description=(
        "The temporal tree (navra, after MemForest): per session, a tree whose leaves are its chunks and whose "
        "internal nodes condense at most 8 children each (one more level when a level outgrows that); per user, "
        "a scene tree of their sessions by day, week within the month, and month; per entity of a user's graph, "
        "an entity tree of the relations, entries and facts about it by day, month and year. Each node has its "
        "time span, seq spans and a summary: extractive (keys and key sentences) with the rules back end, one call "
        "of the configured model per new or changed internal node otherwise (a day, week, month or year once it "
        "has closed: the tree holds a later leaf). Built again for the sessions "
        "whose chunks the day wrote and the users whose graph, entries or facts it wrote; unchanged nodes are "
        "left alone. `memory-pipelines tree show --user U [--session S | --entity E]`."
    ),
)
@guarded_step
def memory_tree(context: dg.AssetExecutionContext, postgres: PostgresResource, llm: ModelResource) -> Iterator:
    pool = get_pool(postgres.url())
    with llm.backend_for_run(pool, context.run_id) as writer:
        report = tree.run(pool, stage_window(context), tree.Settings(), Backends(writer=writer))
    yield from stage_results(context, postgres, report, stop_on_failure=True)

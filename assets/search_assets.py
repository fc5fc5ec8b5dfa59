"""Assets `sketches`, `memory_turns`, `memory_tree` and `memory_embeddings`: what the query
module reads besides facts and chunks."""

from collections.abc import Iterator

import dagster as dg

from assets.asset_checks import quality_check_specs
from assets.materialization import guarded_step, stage_results, stage_window
from assets.partitions import DAILY_ASSET
from assets.resources import EmbedderResource, ModelResource, PostgresResource
from memory_pipelines.db.connection import get_pool
from memory_pipelines.stages import embeddings, sketches as sketch_stage, tree, turns
from memory_pipelines.stages.common import Backends


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
        "of the configured model per new or changed internal node otherwise. Built again for the sessions "
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


@dg.asset(
    **DAILY_ASSET,
    deps=["memory_facts", "memory_chunks", "knowledge_entries", "memory_turns"],
    check_specs=quality_check_specs("memory_embeddings"),
    group_name="embeddings",
    kinds={"pgvector"},
    tags={"stage": "embed"},
    description=(
        "Embeds every visible fact, chunk, knowledge entry and turn (read with its neighbours) whose embedding is "
        "missing or from another model "
        "(MEMORY_EMBED_BACKEND: ollama, openai, local or hashing; a changed embedder re-embeds everything, counted "
        "as re-embedded), in batches, into the table's "
        "`embedding` column with the model recorded. No vector index: searches are per user, where an "
        "exact scan is exact and faster. Hidden (merged) facts are skipped. Safe to run again."
    ),
)
@guarded_step
def memory_embeddings(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
) -> Iterator:
    with embedder.embedder_for_run() as model:
        report = embeddings.run(get_pool(postgres.url()), stage_window(context),
                                embeddings.Settings(), Backends(embedder=model))
    yield from stage_results(context, postgres, report)

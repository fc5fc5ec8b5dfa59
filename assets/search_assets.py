"""Assets `sketches`, `memory_turns` and `memory_embeddings`: what the query module reads
besides facts and chunks."""

from collections.abc import Iterator

import dagster as dg

from assets.asset_checks import partition_scope, quality_check_results, quality_check_specs
from assets.partitions import DAILY_ASSET
from assets.resources import EmbedderResource, PostgresResource
from assets.transcripts import partition_label
from memory_pipelines.db.connection import get_pool
from memory_pipelines.distill import CallContext, collect_sketches
from memory_pipelines.embeddings import embed_missing
from memory_pipelines.reporting import markdown_table
from memory_pipelines.turns import index_turns_for_days


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
def sketches(context: dg.AssetExecutionContext, postgres: PostgresResource) -> Iterator:
    report = collect_sketches(get_pool(postgres.url()), context.partition_keys, CallContext(context.run_id, "sketches"))
    context.log.info("%s: %d scratchpad writes", partition_label(context), report.counts["sketch_writes"])
    yield dg.MaterializeResult(metadata={
        "partitions": partition_label(context),
        "sketch_writes": report.counts["sketch_writes"],
        "scratchpad_reads_skipped": report.counts["scratchpad_reads"],
        "preview": dg.MetadataValue.md(markdown_table(report.preview, ["session", "section", "key", "value", "scope"])),
    })
    yield from quality_check_results(postgres, partition_scope(context), "sketches")


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
def memory_turns(context: dg.AssetExecutionContext, postgres: PostgresResource) -> Iterator:
    report = index_turns_for_days(get_pool(postgres.url()), context.partition_keys, context.run_id)
    context.log.info("%s: %d sessions indexed, %d turns written, %d removed", partition_label(context),
                     len(report.sessions), report.turns_written, report.turns_removed)
    yield dg.MaterializeResult(metadata={
        "partitions": partition_label(context),
        "sessions_indexed": len(report.sessions),
        "turns_written": report.turns_written,
        "turns_removed": report.turns_removed,
        "languages": dict(sorted(report.languages.items())),
    })
    yield from quality_check_results(postgres, partition_scope(context, session_ids=sorted(report.sessions)),
                                     "memory_turns")


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
def memory_embeddings(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
) -> Iterator:
    with embedder.embedder_for_run() as model:
        report = embed_missing(get_pool(postgres.url()), model)
        model_id, dimension = model.model_id, model.dimension
    embedded = {table: len(ids) for table, ids in report.embedded_ids.items()}
    context.log.info("%s: embedded %s with %s", partition_label(context), embedded, model_id)
    if any(report.replaced.values()):
        context.log.info("%s: re-embedded %s rows made with another model", partition_label(context),
                         report.replaced)
    yield dg.MaterializeResult(metadata={
        "partitions": partition_label(context),
        "model": model_id,
        "facts_embedded": embedded["memory_facts"],
        "chunks_embedded": embedded["memory_chunks"],
        "entries_embedded": embedded["knowledge_entries"],
        "turns_embedded": embedded["memory_turns"],
        "turns_re_embedded": report.replaced["memory_turns"],
        "facts_re_embedded": report.replaced["memory_facts"],
        "chunks_re_embedded": report.replaced["memory_chunks"],
        "entries_re_embedded": report.replaced["knowledge_entries"],
    })
    # the id lists bind by table name: the rows this run embedded are checked whatever their partition
    scope = partition_scope(context, model=model_id, dimension=dimension, **report.embedded_ids)
    yield from quality_check_results(postgres, scope, "memory_embeddings")

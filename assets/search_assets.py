"""Assets `sketches` and `memory_embeddings`: what the query module reads besides facts and chunks."""

import dagster as dg

from assets.partitions import DAILY_ASSET
from assets.resources import EmbedderResource, PostgresResource
from assets.transcripts import partition_label
from memory_pipelines.db.connection import get_pool
from memory_pipelines.distill import CallContext, collect_sketches
from memory_pipelines.embeddings import embed_missing
from memory_pipelines.reporting import markdown_table


@dg.asset(
    **DAILY_ASSET,
    deps=["transcripts"],
    group_name="memory",
    kinds={"postgres"},
    tags={"stage": "sketch"},
    description=(
        "Each session's working notes: the scratchpad tool's writes found in the transcripts, by "
        "(section, key) and scope (session or user), updated in place, the newest write winning. Also "
        "writable through the query module (`memory_pipelines.search.write_sketch`)."
    ),
)
def sketches(context: dg.AssetExecutionContext, postgres: PostgresResource) -> dg.MaterializeResult:
    report = collect_sketches(get_pool(postgres.url()), context.partition_keys, CallContext(context.run_id, "sketches"))
    context.log.info("%s: %d scratchpad writes", partition_label(context), report.counts["sketch_writes"])
    return dg.MaterializeResult(metadata={
        "partitions": partition_label(context),
        "sketch_writes": report.counts["sketch_writes"],
        "scratchpad_reads_skipped": report.counts["scratchpad_reads"],
        "preview": dg.MetadataValue.md(markdown_table(report.preview, ["session", "section", "key", "value", "scope"])),
    })


@dg.asset(
    **DAILY_ASSET,
    deps=["memory_facts", "memory_chunks", "knowledge_entries"],
    group_name="embeddings",
    kinds={"pgvector"},
    tags={"stage": "embed"},
    description=(
        "Embeds every visible fact and every chunk whose embedding is missing or from another model "
        "(MEMORY_EMBED_BACKEND: ollama, openai, local or hashing), in batches, into the table's "
        "`embedding` column with the model recorded; then builds one HNSW index (vector_cosine_ops) "
        "per table and model after the load. Hidden (merged) facts are skipped. Safe to run again."
    ),
)
def memory_embeddings(
    context: dg.AssetExecutionContext, postgres: PostgresResource, embedder: EmbedderResource,
) -> dg.MaterializeResult:
    with embedder.embedder_for_run() as model:
        report = embed_missing(get_pool(postgres.url()), model)
        model_id = model.model_id
    context.log.info("%s: embedded %s with %s", partition_label(context), dict(report.embedded), model_id)
    return dg.MaterializeResult(metadata={
        "partitions": partition_label(context),
        "model": model_id,
        "facts_embedded": report.embedded["memory_facts"],
        "chunks_embedded": report.embedded["memory_chunks"],
        "entries_embedded": report.embedded["knowledge_entries"],
        "indexes_built": report.indexes_built,
        "indexes_dropped": report.indexes_dropped,
    })

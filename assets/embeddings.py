"""Asset `memory_embeddings`: the vectors of facts, chunks, knowledge entries and turns."""

from collections.abc import Iterator

import dagster as dg

from assets.asset_checks import quality_check_specs
from assets.materialization import guarded_step, stage_results, stage_window
from assets.partitions import DAILY_ASSET
from assets.resources import EmbedderResource, PostgresResource
from memory_pipelines.db.connection import get_pool
from memory_pipelines.stages import embeddings
from memory_pipelines.stages.common import Backends


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

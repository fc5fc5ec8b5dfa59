"""Assets `memory_facts` (with memory_summary and session_memory_state) and `memory_chunks`."""

from collections.abc import Iterator
from datetime import timedelta

import dagster as dg

from assets.asset_checks import partition_scope, quality_check_results, quality_check_specs
from assets.distillation import call_metadata
from assets.partitions import DAILY_ASSET
from assets.resources import MemorySettings, ModelResource, PostgresResource
from assets.transcripts import partition_label
from memory_pipelines.db.connection import get_pool
from memory_pipelines.distill import CallContext, extract_facts_for_days, pack_chunks_for_days
from memory_pipelines.reporting import markdown_table

@dg.asset(
    **DAILY_ASSET,
    deps=["transcripts", "conversation_segments"],
    check_specs=quality_check_specs("memory_facts"),
    group_name="memory",
    kinds={"postgres"},
    tags={"stage": "extract"},
    description=(
        "Facts about each user extracted from stale sessions (no activity for 30 minutes before the "
        "partition's end, never extracted or extracted before their last activity), with noise left "
        "out. Items are validated one by one; invalid ones go to memory_fact_rejections. Upsert by "
        "(user, category, key) where the newest observation in conversation time wins; re-spelled "
        "keys are merged (the older row hidden via merged_into). Then each touched user's "
        "memory_summary is rewritten and the session marked extracted in session_memory_state."
    ),
)
def memory_facts(
    context: dg.AssetExecutionContext, postgres: PostgresResource, llm: ModelResource,
    memory_settings: MemorySettings,
) -> Iterator:
    pool = get_pool(postgres.url())
    with llm.backend_for_run(pool, context.run_id) as extractor:
        report = extract_facts_for_days(
            pool, context.partition_keys, extractor, CallContext(context.run_id, "memory_facts"),
            stale_after=timedelta(minutes=memory_settings.stale_minutes), concurrency=llm.concurrency,
        )
    for failure in report.failures:
        context.log.warning(str(failure))
    counts = report.counts
    context.log.info("%s: %d sessions extracted, %d facts accepted, %d rejected, %d model calls",
                     partition_label(context), counts["sessions_extracted"], counts["facts_accepted"],
                     counts["facts_rejected"], len(report.calls))
    yield dg.MaterializeResult(metadata={
        "partitions": partition_label(context),
        "sessions_extracted": counts["sessions_extracted"],
        "sessions_failed": counts["sessions_failed"],
        "facts_accepted": counts["facts_accepted"],
        "facts_rejected": counts["facts_rejected"],
        "users_touched": len(report.users),
        "memory_summaries_written": counts["memory_summaries_written"],
        **call_metadata(report),
        "preview": dg.MetadataValue.md(markdown_table(
            report.preview, ["session", "category", "key", "value", "source", "confidence"])),
    })
    yield from quality_check_results(postgres, partition_scope(context, user_ids=sorted(report.users)),
                                     "memory_facts")


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
def memory_chunks(
    context: dg.AssetExecutionContext, postgres: PostgresResource, memory_settings: MemorySettings,
) -> Iterator:
    pool = get_pool(postgres.url())
    report = pack_chunks_for_days(
        pool, context.partition_keys, CallContext(context.run_id, "memory_chunks"),
        stale_after=timedelta(minutes=memory_settings.stale_minutes), window=memory_settings.context_messages,
    )
    counts = report.counts
    context.log.info("%s: %d chunks written from %d messages", partition_label(context),
                     counts["chunks_written"], counts["messages_chunked"])
    yield dg.MaterializeResult(metadata={
        "partitions": partition_label(context),
        "sessions_considered": counts["sessions"],
        "chunks_written": counts["chunks_written"],
        "messages_chunked": counts["messages_chunked"],
        "preview": dg.MetadataValue.md(markdown_table(
            report.preview, ["session", "seqs", "chars", "breadcrumbs", "content"])),
    })
    yield from quality_check_results(postgres, partition_scope(context, session_ids=sorted(report.sessions)),
                                     "memory_chunks")

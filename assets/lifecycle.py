"""Assets `knowledge_entries` + `entity_graph`, `error_memory` and `memory_decay`."""

from collections import Counter
from collections.abc import Iterator

import dagster as dg

from assets.asset_checks import partition_scope, quality_check_results, quality_check_specs
from assets.distillation import call_metadata
from assets.partitions import DAILY_ASSET, daily_partitions
from assets.resources import LifecycleSettings, ModelResource, PostgresResource
from assets.transcripts import partition_label
from memory_pipelines.db.connection import get_pool
from memory_pipelines.distill import CallContext, KnowledgeSettings, collect_error_memory, distill_knowledge_for_days
from memory_pipelines.lifecycle import decay, decay_as_of
from memory_pipelines.reporting import markdown_table


@dg.multi_asset(
    specs=[
        dg.AssetSpec("knowledge_entries", deps=["transcripts", "conversation_segments", "session_summaries"], group_name="knowledge",
                     kinds={"postgres"}, owners=DAILY_ASSET["owners"], tags={"stage": "knowledge"},
                     description=(
                         "Typed entries (fact, event, instruction, insight, user, project) distilled from each "
                         "day's kept segments and the session summary: ingest, synthesize, reconcile, forge. "
                         "Content-addressed (sha256 of kind, title and scope); the same key again updates the "
                         "entry and its version, earlier versions stay in knowledge_entry_versions. Importance "
                         "by kind times confidence; scope entity, process, session or global; valid_until; "
                         "PII sanitized and flagged; consent basis.")),
        dg.AssetSpec("entity_graph", deps=["transcripts", "conversation_segments", "session_summaries"], group_name="knowledge",
                     kinds={"postgres"}, owners=DAILY_ASSET["owners"], tags={"stage": "knowledge"},
                     description=(
                         "(entity, relation, entity) triples with confidence and validity, extracted with the "
                         "entries and carrying the same lineage; a newer contradicting triple closes the "
                         "validity of the older one instead of deleting it.")),
    ],
    check_specs=quality_check_specs("knowledge_entries", "entity_graph"),
    # Subsettable although one synthesis call writes both: Dagster 1.13 rejects, depending on
    # set order, a UI backfill of a non-subsettable multi-asset. A subset still writes both
    # tables (the stage is idempotent) and reports only what was selected.
    can_subset=True,
    partitions_def=daily_partitions,
    backfill_policy=DAILY_ASSET["backfill_policy"],
    retry_policy=DAILY_ASSET["retry_policy"],
)
def knowledge_entries(
    context: dg.AssetExecutionContext, postgres: PostgresResource, llm: ModelResource, lifecycle: LifecycleSettings,
) -> Iterator:
    settings = KnowledgeSettings(lifecycle.sanitize_pii, lifecycle.entry_ttl_seconds, lifecycle.consent_basis)
    pool = get_pool(postgres.url())
    with llm.backend_for_run(pool, context.run_id) as synthesizer:
        report = distill_knowledge_for_days(pool, context.partition_keys, synthesizer,
                                            CallContext(context.run_id, "knowledge_entries"), settings,
                                            llm.concurrency)
    for failure in report.failures:
        context.log.warning(str(failure))
    counts = report.counts
    context.log.info("%s: %d entries seen, %d written, %d relations", partition_label(context),
                     counts["entries_seen"], counts["entries_written"], counts["relations"])
    selected = {key.to_user_string() for key in context.selected_asset_keys}
    if "knowledge_entries" in selected:
        yield dg.MaterializeResult(asset_key="knowledge_entries", metadata={
            "partitions": partition_label(context),
            "entries_seen": counts["entries_seen"],
            "entries_written": counts["entries_written"],
            "entries_dropped": counts["entries_dropped"],
            "entries_with_pii": counts["entries_with_pii"],
            "session_days_unchanged": counts["session_days_unchanged"],
            **call_metadata(report),
            "preview": dg.MetadataValue.md(markdown_table(report.preview, ["session", "kind", "title", "scope",
                                                                           "importance", "pii"])),
        })
    if "entity_graph" in selected:
        yield dg.MaterializeResult(asset_key="entity_graph", metadata={
            "partitions": partition_label(context), "relations": counts["relations"]})
    yield from quality_check_results(postgres, partition_scope(context), *sorted(selected))


@dg.asset(
    **DAILY_ASSET,
    deps=["transcripts"],
    check_specs=quality_check_specs("error_memory"),
    group_name="knowledge",
    kinds={"postgres"},
    tags={"stage": "errors"},
    description=(
        "Resolved tool errors: a failed tool result followed later in the session by a successful call of the "
        "same tool gives (tool, error, fix). 90-day TTL from when it was seen, renewed whenever a search hits it."
    ),
)
def error_memory(context: dg.AssetExecutionContext, postgres: PostgresResource) -> Iterator:
    report = collect_error_memory(get_pool(postgres.url()), context.partition_keys,
                                  CallContext(context.run_id, "error_memory"))
    context.log.info("%s: %d resolved errors", partition_label(context), report.counts["resolved_errors"])
    yield dg.MaterializeResult(metadata={
        "partitions": partition_label(context), "resolved_errors": report.counts["resolved_errors"],
        "preview": dg.MetadataValue.md(markdown_table(report.preview, ["session", "tool", "error", "fix"])),
    })
    yield from quality_check_results(postgres, partition_scope(context), "error_memory")


@dg.asset(
    **DAILY_ASSET,
    deps=["knowledge_entries", "memory_facts", "error_memory", "memory_embeddings"],
    check_specs=quality_check_specs("memory_decay"),
    group_name="knowledge",
    kinds={"postgres"},
    tags={"stage": "decay"},
    description=(
        "Decay archival as of the newest message seen before the partition's end (conversation time). Only memory "
        "at least MEMORY_DECAY_MIN_AGE_DAYS old (90) and unaccessed that long, whose score = importance · "
        "e^(−rate·age_hours) + boost (rate = base_rate / (1 + importance), the boost growing with accesses, capped "
        "at 0.3) fell below the threshold (0.5), moves to memory_archive; never a newer statement about a subject "
        "while an older one stays; facts only with MEMORY_DECAY_FACTS=1. Expired rows, error memories past their "
        "TTL and PII past its retention go too. Archived rows are kept for audit, out of every search, restorable."
    ),
)
def memory_decay(
    context: dg.AssetExecutionContext, postgres: PostgresResource, lifecycle: LifecycleSettings,
) -> Iterator:
    reports = []
    with get_pool(postgres.url()).connection() as conn:
        for key in context.partition_keys:  # each day as of its own newest message, in order
            as_of = decay_as_of(conn, daily_partitions.time_window_for_partition_key(key).end)
            if as_of is None:
                continue
            with conn.transaction():
                reports.append(decay(conn, as_of, key, context.run_id, lifecycle.decay()))
    archived = sum((r.archived for r in reports), start=Counter())
    kept = sum((r.kept for r in reports), start=Counter())
    context.log.info("%s: archived %s", partition_label(context), dict(archived))
    yield dg.MaterializeResult(metadata={
        "partitions": partition_label(context),
        "as_of": reports[-1].as_of.isoformat() if reports else "nothing ingested yet",
        "archived_by_reason": {k: v for k, v in sorted(archived.items()) if v},
        "archived": sum(archived.values()),
        "kept_by_reason": {k: v for k, v in sorted(kept.items()) if v},
        "score_distribution": reports[-1].distribution() if reports else {},
    })
    yield from quality_check_results(postgres, partition_scope(context), "memory_decay")

"""Assets `knowledge_entries` + `entity_graph`, `error_memory` and `memory_decay`."""

from collections.abc import Iterator

import dagster as dg

from assets.asset_checks import quality_check_specs
from assets.materialization import guarded_step, stage_results, stage_window
from assets.partitions import DAILY_ASSET
from assets.resources import LifecycleSettings, PostgresResource
from memory_pipelines.db.connection import get_pool
from memory_pipelines.stages import decay, error_memory as error_stage, knowledge
from memory_pipelines.stages.common import NO_BACKENDS


@dg.multi_asset(
    specs=[
        dg.AssetSpec("knowledge_entries", deps=["transcripts", "conversation_segments", "session_summaries"], group_name="knowledge",
                     kinds={"postgres"}, owners=DAILY_ASSET["owners"], tags={"stage": "knowledge"},
                     description=(
                         "Typed entries (fact, event, instruction, insight, user, project) as each day's "
                         "summary chunks' distillation calls wrote them (no model call here): ingest, "
                         "synthesize, reconcile, forge. "
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
    # Subsettable although one stage writes both: Dagster 1.13 rejects, depending on
    # set order, a UI backfill of a non-subsettable multi-asset. A subset still writes both
    # tables (the stage is idempotent) and reports only what was selected.
    can_subset=True,
    partitions_def=DAILY_ASSET["partitions_def"],
    backfill_policy=DAILY_ASSET["backfill_policy"],
    retry_policy=DAILY_ASSET["retry_policy"],
)
@guarded_step
def knowledge_entries(
    context: dg.AssetExecutionContext, postgres: PostgresResource, lifecycle: LifecycleSettings,
) -> Iterator:
    settings = knowledge.Settings(lifecycle.sanitize_pii, lifecycle.entry_ttl_seconds, lifecycle.consent_basis)
    report = knowledge.run(get_pool(postgres.url()), stage_window(context), settings, NO_BACKENDS)
    yield from stage_results(context, postgres, report)


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
@guarded_step
def error_memory(context: dg.AssetExecutionContext, postgres: PostgresResource) -> Iterator:
    report = error_stage.run(get_pool(postgres.url()), stage_window(context))
    yield from stage_results(context, postgres, report)


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
@guarded_step
def memory_decay(
    context: dg.AssetExecutionContext, postgres: PostgresResource, lifecycle: LifecycleSettings,
) -> Iterator:
    report = decay.run(get_pool(postgres.url()), stage_window(context), lifecycle.decay())
    yield from stage_results(context, postgres, report)

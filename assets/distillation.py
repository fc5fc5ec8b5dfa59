"""Assets `conversation_segments` and `session_summaries`: filtered segments, then rolling
summaries with cursors."""

from collections.abc import Iterator

import dagster as dg

from assets.asset_checks import quality_check_specs
from assets.materialization import guarded_step, stage_results, stage_window
from assets.partitions import DAILY_ASSET, PARTITION_START, PREVIOUS_DAY
from assets.resources import ModelResource, PostgresResource, SummarySettings
from memory_pipelines.db.connection import get_pool
from memory_pipelines.stages import segments, summaries
from memory_pipelines.stages.common import Backends


@dg.asset(
    **DAILY_ASSET,
    deps=["transcripts"],
    check_specs=quality_check_specs("conversation_segments"),
    group_name="distillation",
    kinds={"postgres"},
    tags={"stage": "filter"},
    description=(
        "Each day's messages cut into segments (a user message and the replies up to the next "
        "one), judged by the decision model (MEMORY_DECISION_BACKEND, default `rules`): greetings, "
        "thanks, repeated requests and failed or cancelled turns are noise; noise with confidence "
        ">= 0.7 is kept here, marked dropped with its reason, and left out downstream. A session-day "
        "whose messages did not change is not judged again."
    ),
)
@guarded_step
def conversation_segments(
    context: dg.AssetExecutionContext, postgres: PostgresResource, decision: ModelResource
) -> Iterator:
    pool = get_pool(postgres.url())
    with decision.backend_for_run(pool, context.run_id) as judge:
        report = segments.run(pool, stage_window(context), segments.Settings(concurrency=decision.concurrency),
                              Backends(judge=judge))
    yield from stage_results(context, postgres, report)


@dg.asset(
    **DAILY_ASSET,
    deps=[
        "conversation_segments",
        dg.AssetDep("session_summaries", partition_mapping=PREVIOUS_DAY),
    ],
    check_specs=quality_check_specs("session_summaries"),
    group_name="distillation",
    kinds={"postgres"},
    tags={"stage": "summarize"},
    description=(
        "Rolling summary per session (key_decisions as Do:/Don't:, past and current discussion, "
        "keys, language) with a cursor on the last summarized message, built day by day: the kept "
        "messages newer than the cursor, in chunks of at most 32,000 characters that never end on a "
        "user message, one distillation call per chunk: its answer holds the new summary and the chunk's "
        "facts, knowledge entries and relations (kept with the version, read by memory_facts and "
        "knowledge_entries, which make no call of their own). Every version is kept in "
        "session_summary_versions. "
        "A re-run or late transcript rebuilds forward from the first changed day, reusing every "
        "version whose inputs did not change; temp- sessions are skipped."
    ),
)
@guarded_step
def session_summaries(
    context: dg.AssetExecutionContext, postgres: PostgresResource, llm: ModelResource, decision: ModelResource,
    summary_settings: SummarySettings,
) -> Iterator:
    pool = get_pool(postgres.url())
    settings = summaries.Settings(summary_settings.language, summary_settings.chunk_chars, llm.concurrency,
                                  PARTITION_START.isoformat())
    with llm.backend_for_run(pool, context.run_id) as summarizer, \
            decision.backend_for_run(pool, context.run_id) as decider:
        report = summaries.run(pool, stage_window(context), settings, Backends(judge=decider, writer=summarizer))
    # progress up to a failed chunk is saved; the next run resumes from the cursor
    yield from stage_results(context, postgres, report, stop_on_failure=True)

"""Assets `conversation_segments` and `session_summaries`: filtered segments, then rolling
summaries with cursors."""

from collections.abc import Iterator

import dagster as dg

from assets.asset_checks import partition_scope, quality_check_results, quality_check_specs
from assets.partitions import DAILY_ASSET
from assets.resources import ModelResource, PostgresResource, SummarySettings
from assets.transcripts import partition_label
from memory_pipelines.config import Settings
from memory_pipelines.db.connection import get_pool
from memory_pipelines.distill import CallContext, StageReport, judge_days, summarize_range
from memory_pipelines.reporting import markdown_table


def call_metadata(report: StageReport) -> dict:
    """Model calls, tokens, estimated cost and the model used, for every materialization that calls one."""
    calls = report.calls
    return {
        "model_calls": len(calls),
        "model_calls_failed": sum(1 for c in calls if c.status != "ok"),
        "model_calls_over_budget": sum(c.budget_reached for c in calls),
        "input_tokens": sum(c.input_tokens for c in calls),
        "output_tokens": sum(c.output_tokens for c in calls),
        "estimated_cost_usd": round(sum(c.cost_usd for c in calls if c.cost_usd is not None), 6),
        "unpriced_calls": sum(1 for c in calls if c.cost_usd is None),
        "models": sorted({f"{c.backend}/{c.model}" for c in calls}),
    }


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
def conversation_segments(
    context: dg.AssetExecutionContext, postgres: PostgresResource, decision: ModelResource
) -> Iterator:
    keys = context.partition_keys
    pool = get_pool(postgres.url())
    with decision.backend_for_run(pool, context.run_id) as judge:
        report = judge_days(pool, keys, judge, CallContext(context.run_id, "conversation_segments"),
                            decision.concurrency)
    for failure in report.failures:
        context.log.warning(str(failure))
    counts = report.counts
    context.log.info("%s: %d segments judged (%d dropped), %d unchanged, %d model calls", partition_label(context),
                     counts["segments_judged"], counts["segments_dropped"], counts["segments_reused"], len(report.calls))
    yield dg.MaterializeResult(metadata={
        "partitions": partition_label(context),
        "sessions": counts["sessions"],
        "segments_judged": counts["segments_judged"],
        "segments_dropped": counts["segments_dropped"],
        "segments_unchanged": counts["segments_reused"],
        "judging_failed": counts["segments_judge_failed"],
        "dropped_by_reason": dict(sorted(report.dropped_by_reason.items())),
        **call_metadata(report),
        "preview": dg.MetadataValue.md(markdown_table(
            report.preview, ["segment", "messages", "dropped", "reason", "confidence", "first"])),
    })
    yield from quality_check_results(postgres, partition_scope(context), "conversation_segments")


@dg.asset(
    **DAILY_ASSET,
    deps=[
        "conversation_segments",
        dg.AssetDep("session_summaries",
                    partition_mapping=dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)),
    ],
    check_specs=quality_check_specs("session_summaries"),
    group_name="distillation",
    kinds={"postgres"},
    tags={"stage": "summarize"},
    description=(
        "Rolling summary per session (key_decisions as Do:/Don't:, past and current discussion, "
        "keys, language) with a cursor on the last summarized message, built day by day: the kept "
        "messages newer than the cursor, in chunks of at most 32,000 characters that never end on a "
        "user message, one model call per chunk. Every version is kept in session_summary_versions. "
        "A re-run or late transcript rebuilds forward from the first changed day, reusing every "
        "version whose inputs did not change; temp- sessions are skipped."
    ),
)
def session_summaries(
    context: dg.AssetExecutionContext, postgres: PostgresResource, llm: ModelResource, decision: ModelResource,
    summary_settings: SummarySettings,
) -> Iterator:
    keys = context.partition_keys
    pool = get_pool(postgres.url())
    with llm.backend_for_run(pool, context.run_id) as summarizer, \
            decision.backend_for_run(pool, context.run_id) as decider:
        report = summarize_range(
            pool, keys, summarizer, decider, CallContext(context.run_id, "session_summaries"),
            language=summary_settings.language, chunk_chars=summary_settings.chunk_chars,
            concurrency=llm.concurrency, partition_start=Settings.from_env().partition_start.isoformat(),
        )
    counts = report.counts
    built = sum(report.versions_by_kind.values())
    metadata = {
        "partitions": partition_label(context),
        "sessions": counts["sessions"],
        "versions_built": built,
        "versions_reused": counts["versions_reused"],
        "chunks_summarized": report.versions_by_kind["chunk"],
        "trim_or_cursor_only": report.versions_by_kind["trim"] + report.versions_by_kind["cursor_only"],
        "rebuilt_from_changed_day": counts["rebuilt_from_changed_day"],
        "sessions_incomplete": counts["sessions_incomplete"],
        **call_metadata(report),
        "preview": dg.MetadataValue.md(markdown_table(
            report.preview, ["session", "version", "day", "step", "cursor_seq", "current"])),
    }
    if report.failures:
        # Progress up to the failed chunk is saved; the next run resumes from the cursor. A
        # spent token budget stays spent for this run: retrying the step cannot help.
        raise dg.Failure(
            description=f"{len(report.failures)} session(s) stopped at a failed model call: {report.failures[0]}",
            metadata={**metadata, "failures": dg.MetadataValue.md("\n".join(f"- {f}" for f in report.failures))},
            allow_retries=not all(f.budget_reached for f in report.failures),
        )
    context.log.info("%s: %d sessions, %d versions built, %d reused, %d model calls", partition_label(context),
                     counts["sessions"], built, counts["versions_reused"], len(report.calls))
    yield dg.MaterializeResult(metadata=metadata)
    yield from quality_check_results(postgres, partition_scope(context), "session_summaries")

"""What every asset body does with its stage's report, written once: the stage window of the
run, the materialization metadata (counts, partition window, model calls and tokens, a
markdown preview), the log lines, and the asset's quality checks over what it wrote."""

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg

from assets.asset_checks import partition_scope, quality_check_results
from assets.partitions import partition_key, split_partition_keys
from assets.resources import PostgresResource
from memory_pipelines.db import schema as schema_db
from memory_pipelines.db.connection import get_pool
from memory_pipelines.db.outage import DatabaseLost, ServerLog, connection_lost
from memory_pipelines.heap import settle_heap
from memory_pipelines.reporting import markdown_table
from memory_pipelines.stages.common import StageReport, Window


def stage_window(context: dg.AssetExecutionContext) -> Window:
    """The days this run materializes, in order (one day, or a backfill's range as one run),
    and its shard, once the database is known to be distilled with this many shards."""
    days, shard = split_partition_keys(list(context.partition_keys))
    with get_pool(context.resources.postgres.url()).connection() as conn:
        schema_db.check_shard_layout(conn, shard.count)
    return Window(days, context.run_id, shard)


# what a step of a run asked to stop says instead of beginning
STOPPED_BEFORE_STEP = "the run was asked to stop before this step began"


def guarded_step(body: Callable[..., Iterator]) -> Callable[..., Iterator]:
    """An asset body as a step of a run that may be stopped, or lose its database:
    - a step of a run asked to stop (`memory-pipelines run` on SIGINT/SIGTERM marks it
      canceling; so does the UI's Terminate) does not begin: the run ends canceled after the
      step in progress, which finishes and commits;
    - a step whose database went away under it (a crashed server process, a stop) fails in
      one line: what the embedded server's log says ended it, the step's days, what to do.
      Its stage committed what it finished; the retry starts from there.
    A process's first step settles its heap first (memory_pipelines/heap.py)."""

    @functools.wraps(body)
    def step(context: dg.AssetExecutionContext, postgres: PostgresResource, **resources) -> Iterator:
        run = context.instance.get_run_by_id(context.run_id)
        if run is not None and run.status == dg.DagsterRunStatus.CANCELING:
            raise dg.Failure(description=STOPPED_BEFORE_STEP, allow_retries=False)
        settle_heap()
        log = ServerLog.of_home(Path(postgres.home), postgres.database_url)
        try:
            yield from body(context, postgres=postgres, **resources)
        except Exception as exc:
            if not connection_lost(exc):
                raise
            keys = context.partition_key_range
            days = keys.start if keys.start == keys.end else f"{keys.start}..{keys.end}"
            raise DatabaseLost(f"materializing {context.op_def.name} for {days}", log,
                               then="the step is retried; run these days again if it fails") from None

    return step


def call_metadata(report: StageReport) -> dict:
    """Model calls, tokens, estimated cost and the models used."""
    calls = report.calls
    return {
        "model_calls": len(calls),
        "model_calls_failed": sum(1 for c in calls if c.status != "ok"),
        "model_calls_over_budget": sum(c.budget_reached for c in calls),
        # answers that broke their prompt's schema and were asked again once
        "model_calls_schema_retried": sum(c.schema_retried for c in calls),
        "input_tokens": sum(c.input_tokens for c in calls),
        "output_tokens": sum(c.output_tokens for c in calls),
        "estimated_cost_usd": round(sum(c.cost_usd for c in calls if c.cost_usd is not None), 6),
        "unpriced_calls": sum(1 for c in calls if c.cost_usd is None),
        "models": sorted({f"{c.backend}/{c.model}" for c in calls}),
    }


def _preview(rows: list[dict]) -> dg.MetadataValue:
    return dg.MetadataValue.md(markdown_table(rows, list(rows[0]) if rows else []))


def report_metadata(window: Window, report: StageReport) -> dict:
    return {
        "partitions": window.label,
        **({"shard": window.shard.label} if window.shard.label else {}),
        **report.counts.metadata(),
        **(call_metadata(report) if report.calls_models else {}),
        "preview": _preview(report.preview),
        **{name: _preview(rows) for name, rows in report.extra_previews.items()},
    }


def stage_results(context: dg.AssetExecutionContext, postgres: PostgresResource, report: StageReport,
                  *, stop_on_failure: bool = False, **extra_metadata) -> Iterator:
    """The materialization(s) of the assets this step selected, then their quality checks
    over the rows in scope. With `stop_on_failure`, a session the stage could not finish
    fails the step instead (what it saved stays; the next run resumes), retried unless the
    run's token budget is what stopped it."""
    window = stage_window(context)
    metadata = {**report_metadata(window, report), **extra_metadata}
    for warning in report.warnings:
        context.log.warning("%s: %s", window.label, warning)
    if report.failures and stop_on_failure:
        raise dg.Failure(
            description=f"{len(report.failures)} session(s) stopped at a failed model call: {report.failures[0]}",
            metadata={**metadata, "failures": dg.MetadataValue.md("\n".join(f"- {f}" for f in report.failures))},
            allow_retries=not all(f.budget_reached for f in report.failures),
        )
    for failure in report.failures:
        context.log.warning(str(failure))
    calls = f", {len(report.calls)} model calls" if report.calls_models else ""
    context.log.info("%s: %s%s", window.label, report.counts.headline() or "nothing to do", calls)
    selected = sorted(key.to_user_string() for key in context.selected_asset_keys)
    for asset in selected:  # a multi-asset's one stage writes every table it declares
        if len(window.partition_keys) > 1:
            # Dagster records a materialization per day of a range, each with its own copy of
            # the metadata: the range's totals go on its last day, the others name that day
            # (serializing 720 copies of the preview was most of a two-year run's bookkeeping)
            context.add_asset_metadata(metadata, asset_key=asset,
                                       partition_key=partition_key(window.last, window.shard.index))
            yield dg.MaterializeResult(asset_key=asset, metadata={
                "partitions": window.label, "range_totals_on": window.last})
        else:
            yield dg.MaterializeResult(asset_key=asset, metadata=metadata)
    yield from quality_check_results(postgres, partition_scope(context, window, **report.check_scope), *selected)

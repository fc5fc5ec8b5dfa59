"""Data-quality gates as asset checks: each stage's checks (memory_pipelines.quality_gates.catalogue) are
declared on its asset and yielded from its body over the rows of the partition(s) being
materialized. An unpartitioned `@asset_check` would read every partition."""

import dagster as dg

from assets.resources import PostgresResource
from memory_pipelines.quality_gates.catalogue import CHECKS, QualityCheck, run_checks
from memory_pipelines.quality_gates.expectations import QualityResult
from memory_pipelines.stages.common import Window


def quality_check_specs(*assets: str) -> list[dg.AssetCheckSpec]:
    return [dg.AssetCheckSpec(check.name, asset=asset, blocking=check.blocking, description=check.description)
            for asset in assets for check in CHECKS[asset]]


def partition_scope(context: dg.AssetExecutionContext, window: Window, **extra) -> dict:
    """What every check query may bind: the run's days, their time window, its shard and the
    run id, plus what the asset adds."""
    return {"partition_keys": list(window.partition_keys), "start": window.span.start, "end": window.span.end,
            "run_id": context.run_id, **window.shard.params, **extra}


def check_result(asset: str, check: QualityCheck, outcome: QualityResult) -> dg.AssetCheckResult:
    """A great-expectations run as an asset check result with a readable summary."""
    return dg.AssetCheckResult(
        asset_key=asset, check_name=check.name, passed=outcome.passed,
        # an advisory check warns; only an error-severity failure of a blocking check stops the run
        severity=dg.AssetCheckSeverity.ERROR if check.blocking else dg.AssetCheckSeverity.WARN,
        metadata={"summary": outcome.summary, "rows_checked": outcome.rows,
                  "failures": dg.MetadataValue.md("\n".join(f"- {f}" for f in outcome.failures) or "none")},
    )


def quality_check_results(postgres: PostgresResource, scope: dict, *assets: str) -> list[dg.AssetCheckResult]:
    """Every check of the assets over the rows in `scope`, for the asset body to yield."""
    with postgres.connection() as conn:
        return [check_result(asset, check, outcome)
                for asset in assets for check, outcome in run_checks(conn, CHECKS[asset], scope)]

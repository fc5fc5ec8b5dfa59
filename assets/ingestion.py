"""Asset `transcripts`: the message archive (`messages`, `sessions`, `quarantine`)."""

from collections.abc import Iterator

import dagster as dg

from assets.asset_checks import quality_check_specs
from assets.materialization import guarded_step, stage_results, stage_window
from assets.partitions import DAILY_ASSET
from assets.resources import PostgresResource, TranscriptSourceResource
from memory_pipelines.db.connection import get_pool
from memory_pipelines.stages import transcripts as transcript_stage


@dg.asset(
    **DAILY_ASSET,
    check_specs=quality_check_specs("transcripts"),
    group_name="ingestion",
    kinds={"duckdb", "postgres"},
    tags={"stage": "ingest"},
    description=(
        "Every transcript message whose time falls in the partition, from a folder, an s3:// "
        "prefix or an agent's own PostgreSQL table (MEMORY_TRANSCRIPTS), in the formats of "
        "docs/formats.md, validated by DuckDB, and archived in `messages` "
        "(unique on session_id, seq) with `sessions` kept in step. Refused records go to "
        "`quarantine` with their reason, and are marked resolved once a later run stores them "
        "(`refusals_resolved`); records of users forgotten on request are skipped; "
        "read = stored + duplicate + quarantined + forgotten + superseded (re-sent turns a "
        "replace merge set aside). A fork's records name `parent_session_id` and `fork_seq`."
    ),
)
@guarded_step
def transcripts(
    context: dg.AssetExecutionContext, postgres: PostgresResource, transcript_source: TranscriptSourceResource
) -> Iterator:
    settings = transcript_stage.Settings(transcript_source.settings())
    report = transcript_stage.run(get_pool(postgres.url()), stage_window(context), settings)
    yield from stage_results(context, postgres, report, **{"dagster/row_count": report.counts.stored})

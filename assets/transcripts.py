"""Asset `transcripts`: the message archive (`messages`, `sessions`, `quarantine`)."""

from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from assets.asset_checks import quality_check_specs
from assets.materialization import stage_results, stage_window
from assets.partitions import DAILY_ASSET
from assets.resources import PostgresResource, TranscriptSource
from memory_pipelines.db.connection import get_pool
from memory_pipelines.stages import transcripts as transcript_stage


@dg.asset(
    **DAILY_ASSET,
    check_specs=quality_check_specs("transcripts"),
    group_name="ingestion",
    kinds={"duckdb", "postgres"},
    tags={"stage": "ingest"},
    description=(
        "Every transcript message whose time falls in the partition, scanned by DuckDB from "
        "JSON Lines, Parquet and history.json files, validated, and archived in `messages` "
        "(unique on session_id, seq) with `sessions` kept in step. Refused records go to "
        "`quarantine` with their reason; records of users forgotten on request are skipped; "
        "read = stored + duplicate + quarantined + forgotten + superseded (re-sent turns a "
        "replace merge set aside). A fork's records name `parent_session_id` and `fork_seq`."
    ),
)
def transcripts(
    context: dg.AssetExecutionContext, postgres: PostgresResource, transcript_source: TranscriptSource
) -> Iterator:
    settings = transcript_stage.Settings(Path(transcript_source.path), transcript_source.timezone,
                                         transcript_source.max_message_bytes)
    report = transcript_stage.run(get_pool(postgres.url()), stage_window(context), settings)
    yield from stage_results(context, postgres, report, **{"dagster/row_count": report.counts.stored})

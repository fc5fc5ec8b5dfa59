"""Daily partitions on message time (UTC)."""

import dagster as dg

from memory_pipelines.config import Settings

# end_offset=1: today's partition exists, so the sensor and schedule can ingest it as it grows.
daily_partitions = dg.DailyPartitionsDefinition(
    start_date=Settings.from_env().partition_start.isoformat(), timezone="UTC", end_offset=1
)


# What every daily asset shares: one run for a multi-day UI backfill (the asset walks the
# days itself, in order), the owner and where it shows in the UI.
DAILY_ASSET = {
    "partitions_def": daily_partitions,
    "backfill_policy": dg.BackfillPolicy.single_run(),
    "owners": ["team:memory-pipelines"],
}

"""Daily partitions on message time (UTC)."""

import dagster as dg

from memory_pipelines.config import Settings

# end_offset=1: today's partition exists, so the sensor and schedule can ingest it as it grows.
daily_partitions = dg.DailyPartitionsDefinition(
    start_date=Settings.from_env().partition_start.isoformat(), timezone="UTC", end_offset=1
)

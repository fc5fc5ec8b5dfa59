"""Daily partitions on message time (UTC)."""

import dagster as dg

from memory_pipelines.config import setting

# end_offset=1: today's partition exists, so the sensor and schedule can ingest it as it grows.
daily_partitions = dg.DailyPartitionsDefinition(
    start_date=setting("MEMORY_PARTITION_START").isoformat(), timezone="UTC", end_offset=1
)


# A step that fails (a model server down past its own HTTP retries, a database restart) is
# run again after a pause; every stage is idempotent and writes in transactions, so a retry
# starts from what the failed attempt committed. MEMORY_RETRY_MAX=0 turns retries off.
TRANSIENT_RETRIES = dg.RetryPolicy(
    max_retries=setting("MEMORY_RETRY_MAX"),
    delay=setting("MEMORY_RETRY_DELAY"),
    backoff=dg.Backoff.EXPONENTIAL,
    jitter=dg.Jitter.PLUS_MINUS,
)

# What every daily asset shares: one run for a multi-day UI backfill (the asset walks the
# days itself, in order), retries, the owner and where it shows in the UI.
DAILY_ASSET = {
    "partitions_def": daily_partitions,
    "backfill_policy": dg.BackfillPolicy.single_run(),
    "retry_policy": TRANSIENT_RETRIES,
    "owners": ["team:memory-pipelines"],
}

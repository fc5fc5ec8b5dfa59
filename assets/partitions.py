"""Daily partitions on message time (UTC); with MEMORY_SHARDS above 1, day x user shard."""

import dagster as dg

from assets.location import location_settings
from assets.partition_start import partition_start
from memory_pipelines.shards import Shard

SETTINGS = location_settings()

# Where the data starts (MEMORY_PARTITION_START, else the first transcript day the database
# knows, else 2024-01-01: assets/partition_start.py), read once on import. end_offset=1:
# today's partition exists, so the sensor and schedule can ingest it as it grows.
PARTITION_START = partition_start(SETTINGS)
daily_partitions = dg.DailyPartitionsDefinition(
    start_date=PARTITION_START.isoformat(), timezone="UTC", end_offset=1
)

SHARDS = SETTINGS.shards
DAY, SHARD = "day", "shard"  # the dimensions; Dagster writes a key "DAY|SHARD" (it orders them by name)
SHARD_TAG = "memory/shard"  # on every run of one shard: the UI groups by it, the coordinator limits by it

# One shard keeps today's daily partitions (nothing to migrate); more add a static dimension.
memory_partitions: dg.PartitionsDefinition = daily_partitions if SHARDS == 1 else dg.MultiPartitionsDefinition(
    {DAY: daily_partitions, SHARD: dg.StaticPartitionsDefinition([str(i) for i in range(SHARDS)])})

# What a rolling summary depends on: its own previous day, of the same shard.
_DAY_BEFORE = dg.TimeWindowPartitionMapping(start_offset=-1, end_offset=-1)
PREVIOUS_DAY: dg.PartitionMapping = _DAY_BEFORE if SHARDS == 1 else dg.MultiPartitionMapping({
    DAY: dg.DimensionPartitionMapping(DAY, _DAY_BEFORE),
    SHARD: dg.DimensionPartitionMapping(SHARD, dg.IdentityPartitionMapping())})


def partition_key(day: str, shard: int) -> str:
    """The partition key of a shard's day (the day itself when unsharded)."""
    return day if SHARDS == 1 else dg.MultiPartitionKey({DAY: day, SHARD: str(shard)})


def split_partition_keys(keys: list[str]) -> tuple[tuple[str, ...], Shard]:
    """The days and the one shard a run's partition keys name. A run covers one shard: a
    shard's days must go in order, and the shards' runs go side by side."""
    if SHARDS == 1:
        return tuple(keys), Shard()
    parts = [memory_partitions.get_partition_key_from_str(key).keys_by_dimension for key in keys]
    shards = sorted({int(part[SHARD]) for part in parts})
    if len(shards) != 1:
        raise ValueError(
            f"this run covers shards {', '.join(map(str, shards))}: a run works on one shard's days. Launch a "
            f"backfill per shard (pick one shard in the partition selector) or `memory-pipelines run --shards all`")
    return tuple(sorted({part[DAY] for part in parts})), Shard(shards[0], SHARDS)


# A step that fails (a model server down past its own HTTP retries, a database restart) is
# run again after a pause; every stage is idempotent and writes in transactions, so a retry
# starts from what the failed attempt committed. MEMORY_RETRY_MAX=0 turns retries off.
TRANSIENT_RETRIES = dg.RetryPolicy(
    max_retries=SETTINGS.retry_max,
    delay=SETTINGS.retry_delay,
    backoff=dg.Backoff.EXPONENTIAL,
    jitter=dg.Jitter.PLUS_MINUS,
)

# What every daily asset shares: one run for a multi-day UI backfill (the asset walks the
# days itself, in order), retries, the owner and where it shows in the UI.
DAILY_ASSET = {
    "partitions_def": memory_partitions,
    "backfill_policy": dg.BackfillPolicy.single_run(),
    "retry_policy": TRANSIENT_RETRIES,
    "owners": ["team:memory-pipelines"],
}

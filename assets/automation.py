"""Scheduled distillation: a schedule for what is new, and a sensor that notices new or
changed transcript files and requests runs for exactly the days they touch."""

import json
from collections.abc import Sequence
from datetime import UTC, date

import dagster as dg

from assets.location import location_settings
from assets.partition_start import start_in
from assets.partitions import SHARD_TAG, SHARDS, daily_partitions, partition_key
from assets.resources import PostgresResource, TranscriptSourceResource
from memory_pipelines.config import mask_url
from memory_pipelines.digests import json_digest
from memory_pipelines.db.connection import get_pool
from memory_pipelines.sources import open_source
from memory_pipelines.sources.base import TranscriptSourceError
from memory_pipelines.sources.files import PostgresIndex

AUTOMATION_ON = location_settings().automation
DEFAULT_STATUS = dg.DefaultScheduleStatus.RUNNING if AUTOMATION_ON else dg.DefaultScheduleStatus.STOPPED


def shard_run(run_key: str, day: str, shard: int) -> dg.RunRequest:
    """A run of one day of one shard (of every user, unsharded), tagged with its shard so the
    UI groups the shard's runs and the queued coordinator starts one of them at a time."""
    if SHARDS == 1:
        return dg.RunRequest(run_key=run_key, partition_key=day)
    return dg.RunRequest(run_key=f"{run_key}#{shard}", partition_key=partition_key(day, shard),
                         tags={SHARD_TAG: str(shard)})


def days_before_start(first: str, days: Sequence[date], fixed_start: date | None,
                      url: str) -> tuple[str, bool] | None:
    """What the sensor says of changed days before the first partition `first` (None: there
    are none), and whether their runs are requested once the code location loads again: they
    are when a load now would start at them (no `fixed_start`, MEMORY_PARTITION_START; their
    files indexed in the database at `url`); the sensor then keeps its cursor, and a run key
    it already requested is not requested twice. Else they are left out, as days after today
    are."""
    early = [day.isoformat() for day in days if day.isoformat() < first]
    if not early:
        return None
    named = f"{len(early)} days from {early[0]} to {early[-1]}" if len(early) > 1 else early[0]
    start = fixed_start or start_in(url)
    if start <= date.fromisoformat(early[0]):
        return (f"transcripts of {named} lie before the first partition, {first}: reload the code location (its "
                f"partitions then start at {start}) and the next tick requests their runs"), True
    return (f"transcripts of {named} lie before the first partition, {first}, and are not run: set "
            f"MEMORY_PARTITION_START={early[0]}, reload the code location and backfill them (or run "
            f"`memory-pipelines run --start {early[0]}`)"), False


def build_automation(job):
    @dg.schedule(job=job, cron_schedule=location_settings().schedule_cron,
                 execution_timezone="UTC", default_status=DEFAULT_STATUS,
                 description="Distills today's partition every 15 minutes (MEMORY_SCHEDULE_CRON): sessions that "
                             "went stale are extracted, summaries move on; unchanged inputs cost no model call.")
    def distill_schedule(context: dg.ScheduleEvaluationContext):
        moment = context.scheduled_execution_time.astimezone(UTC)
        key = daily_partitions.get_partition_key_for_timestamp(moment.timestamp())
        return [shard_run(f"{key}@{moment.isoformat()}", key, shard) for shard in range(SHARDS)]

    @dg.sensor(job=job, minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.RUNNING if AUTOMATION_ON else dg.DefaultSensorStatus.STOPPED,
               description="Watches MEMORY_TRANSCRIPTS (a folder, an s3:// prefix or a postgresql:// table); new or "
                           "changed input requests a run for each day its records fall on, once (the cursor keeps "
                           "every file's size and modification time, or a table's watermark).")
    def transcript_files_sensor(context: dg.SensorEvaluationContext, postgres: PostgresResource,
                                transcript_source: TranscriptSourceResource):
        settings = transcript_source.settings()
        seen = json.loads(context.cursor) if context.cursor else {}
        try:
            # the runs' own index: a file already scanned by a run (or an earlier tick, even
            # of a process since restarted) is not read again to learn its days
            found = open_source(settings, PostgresIndex(get_pool(postgres.url()))).changes(seen)
        except TranscriptSourceError as exc:
            return dg.SkipReason(str(exc))
        if not found.changed:
            return dg.SkipReason(f"nothing new or changed in {mask_url(settings.location)}")
        valid = set(daily_partitions.get_partition_keys())
        digest = json_digest([found.changed, found.cursor], sort_keys=True)[:12]
        requests = [shard_run(f"{day.isoformat()}:{digest}", day.isoformat(), shard)
                    for day in found.days if day.isoformat() in valid for shard in range(SHARDS)]
        early = days_before_start(daily_partitions.get_first_partition_key(), found.days,
                                  location_settings().partition_start, postgres.url())
        if early is not None:
            message, after_reload = early
            context.log.warning(message)
            if after_reload:  # the cursor stays: the tick after the reload sees these changes again
                return requests or dg.SkipReason(message)
        context.update_cursor(json.dumps(found.cursor))
        return requests

    return distill_schedule, transcript_files_sensor

"""Scheduled distillation: a schedule for what is new, and a sensor that notices new or
changed transcript files and requests runs for exactly the days they touch."""

import hashlib
import json
from datetime import UTC
from pathlib import Path

import dagster as dg

from assets.partitions import daily_partitions
from memory_pipelines.config import Settings, setting
from memory_pipelines.transcripts import TranscriptSourceError, discover_files, transcript_days

AUTOMATION_ON = setting("MEMORY_AUTOMATION")
DEFAULT_STATUS = dg.DefaultScheduleStatus.RUNNING if AUTOMATION_ON else dg.DefaultScheduleStatus.STOPPED


def _file_states(root: Path) -> dict[str, list[int]]:
    import duckdb

    with duckdb.connect() as con:
        files = discover_files(con, root).files
    return {str(f): [f.stat().st_size, f.stat().st_mtime_ns] for f in files}


def build_automation(job):
    @dg.schedule(job=job, cron_schedule=setting("MEMORY_SCHEDULE_CRON"),
                 execution_timezone="UTC", default_status=DEFAULT_STATUS,
                 description="Distills today's partition every 15 minutes (MEMORY_SCHEDULE_CRON): sessions that "
                             "went stale are extracted, summaries move on; unchanged inputs cost no model call.")
    def distill_schedule(context: dg.ScheduleEvaluationContext):
        moment = context.scheduled_execution_time.astimezone(UTC)
        key = daily_partitions.get_partition_key_for_timestamp(moment.timestamp())
        return dg.RunRequest(run_key=f"{key}@{moment.isoformat()}", partition_key=key)

    @dg.sensor(job=job, minimum_interval_seconds=60,
               default_status=dg.DefaultSensorStatus.RUNNING if AUTOMATION_ON else dg.DefaultSensorStatus.STOPPED,
               description="Watches MEMORY_TRANSCRIPTS; a new or changed file requests a run for each day its "
                           "records fall on, once (the cursor remembers every file's size and modification time).")
    def transcript_files_sensor(context: dg.SensorEvaluationContext):
        settings = Settings.from_env()
        seen = json.loads(context.cursor) if context.cursor else {}
        try:
            current = _file_states(settings.transcripts)
        except TranscriptSourceError as exc:
            return dg.SkipReason(str(exc))
        changed = sorted(path for path, state in current.items() if seen.get(path) != state)
        if not changed:
            return dg.SkipReason(f"no new or changed transcript files under {settings.transcripts}")
        valid = set(daily_partitions.get_partition_keys())
        # days as a scan of the whole location attributes the changed files' records
        days = {d.isoformat() for d in transcript_days(settings.transcripts, [Path(p) for p in changed],
                                                       timezone=settings.timezone,
                                                       max_bytes=settings.max_message_bytes)}
        digest = hashlib.sha256(json.dumps({p: current[p] for p in changed}).encode()).hexdigest()[:12]
        context.update_cursor(json.dumps(current))
        return [dg.RunRequest(run_key=f"{day}:{digest}", partition_key=day) for day in sorted(days & valid)]

    return distill_schedule, transcript_files_sensor

"""The schedule and the transcript-file sensor, evaluated with built contexts."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime

import dagster as dg

from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from tests.helpers import location_days


def test_sensor_requests_exactly_the_partitions_new_files_touch(tmp_path, monkeypatch):
    from assets.definitions import transcript_files_sensor

    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    monkeypatch.setenv("MEMORY_TRANSCRIPTS", str(folder))
    context = dg.build_sensor_context(cursor=None)
    first = transcript_files_sensor(context)
    assert sorted(r.partition_key for r in first) == [d.isoformat() for d in location_days(folder)]
    cursor = context.cursor
    # nothing new: nothing requested
    again = dg.build_sensor_context(cursor=cursor)
    assert isinstance(transcript_files_sensor(again), dg.SkipReason)
    # a late file for one day: exactly that day, once
    (folder / "late.jsonl").write_text(json.dumps({
        "session_id": "late-1", "user_id": "bob", "seq": 1, "role": "user", "content": "late",
        "ts": "2026-10-04T20:00:00Z"}) + "\n")
    late = dg.build_sensor_context(cursor=cursor)
    requests = transcript_files_sensor(late)
    assert [r.partition_key for r in requests] == ["2026-10-04"]
    assert isinstance(transcript_files_sensor(dg.build_sensor_context(cursor=late.cursor)), dg.SkipReason)


def test_schedule_requests_the_partition_of_its_tick():
    from assets.definitions import defs, distill_schedule

    context = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 10, 5, 12, 15, tzinfo=UTC))
    request = distill_schedule(context)
    assert request.partition_key == "2026-10-05" and request.run_key == "2026-10-05@2026-10-05T12:15:00+00:00"
    assert distill_schedule.cron_schedule == "*/15 * * * *"
    assert defs.resolve_job_def("distill") is not None

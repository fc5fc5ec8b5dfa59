"""The schedule and the transcript-file sensor, evaluated with built contexts."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime

import dagster as dg
import psycopg

from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from tests.helpers import location_days, sensor_context


def test_sensor_requests_exactly_the_partitions_new_files_touch(tmp_path, monkeypatch, database_url):
    from assets.definitions import transcript_files_sensor

    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    monkeypatch.setenv("MEMORY_TRANSCRIPTS", str(folder))
    context = sensor_context(database_url, None)
    first = transcript_files_sensor(context)
    assert sorted(r.partition_key for r in first) == [d.isoformat() for d in location_days(folder)]
    cursor = context.cursor
    # what the tick scanned is in the runs' own index: a run (or a restarted sensor) reads none of it again
    with psycopg.connect(database_url) as conn:
        indexed = {name for (name,) in conn.execute("SELECT name FROM transcript_objects")}
    assert indexed == {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} and indexed
    # nothing new: nothing requested
    again = sensor_context(database_url, cursor)
    assert isinstance(transcript_files_sensor(again), dg.SkipReason)
    # a late file for one day: exactly that day, once
    (folder / "late.jsonl").write_text(json.dumps({
        "session_id": "late-1", "user_id": "bob", "seq": 1, "role": "user", "content": "late",
        "ts": "2026-10-04T20:00:00Z"}) + "\n")
    late = sensor_context(database_url, cursor)
    requests = transcript_files_sensor(late)
    assert [r.partition_key for r in requests] == ["2026-10-04"]
    assert isinstance(transcript_files_sensor(sensor_context(database_url, late.cursor)), dg.SkipReason)


def test_schedule_requests_the_partition_of_its_tick():
    from assets.definitions import defs, distill_schedule

    context = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 10, 5, 12, 15, tzinfo=UTC))
    [request] = distill_schedule(context)  # unsharded: one run
    assert request.partition_key == "2026-10-05" and request.run_key == "2026-10-05@2026-10-05T12:15:00+00:00"
    assert distill_schedule.cron_schedule == "*/15 * * * *"
    assert defs.resolve_job_def("distill") is not None

"""The schedule and the transcript-file sensor, evaluated with built contexts."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from datetime import UTC, date, datetime

import dagster as dg
import psycopg

from assets import location
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from tests.helpers import location_days, sensor_context


def test_sensor_requests_exactly_the_partitions_new_files_touch(tmp_path, monkeypatch, database_url):
    from assets.definitions import transcript_files_sensor

    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    context = sensor_context(database_url, None, folder)
    first = transcript_files_sensor(context)
    assert sorted(r.partition_key for r in first) == [d.isoformat() for d in location_days(folder)]
    cursor = context.cursor
    # what the tick scanned is in the runs' own index: a run (or a restarted sensor) reads none of it again
    with psycopg.connect(database_url) as conn:
        indexed = {name for (name,) in conn.execute("SELECT name FROM transcript_objects")}
    assert indexed == {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} and indexed
    # nothing new: nothing requested
    again = sensor_context(database_url, cursor, folder)
    assert isinstance(transcript_files_sensor(again), dg.SkipReason)
    # a late file for one day: exactly that day, once
    (folder / "late.jsonl").write_text(json.dumps({
        "session_id": "late-1", "user_id": "bob", "seq": 1, "role": "user", "content": "late",
        "ts": "2026-10-04T20:00:00Z"}) + "\n")
    late = sensor_context(database_url, cursor, folder)
    requests = transcript_files_sensor(late)
    assert [r.partition_key for r in requests] == ["2026-10-04"]
    assert isinstance(transcript_files_sensor(sensor_context(database_url, late.cursor, folder)), dg.SkipReason)


def test_schedule_requests_the_partition_of_its_tick():
    from assets.definitions import defs, distill_schedule

    context = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 10, 5, 12, 15, tzinfo=UTC))
    [request] = distill_schedule(context)  # unsharded: one run
    assert request.partition_key == "2026-10-05" and request.run_key == "2026-10-05@2026-10-05T12:15:00+00:00"
    assert distill_schedule.cron_schedule == "*/15 * * * *"
    assert defs.resolve_job_def("distill") is not None


def test_sensor_days_before_the_first_partition_wait_for_a_reload_or_are_named(tmp_path, monkeypatch, database_url):
    from assets.definitions import transcript_files_sensor
    from assets.partitions import daily_partitions

    assert daily_partitions.get_first_partition_key() == "2024-01-01"  # as loaded (tests/__init__.py)
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    (folder / "old.jsonl").write_text(json.dumps({
        "session_id": "old-1", "user_id": "bob", "seq": 1, "role": "user", "content": "an old transcript",
        "ts": "2023-12-30T10:00:00Z"}) + "\n")
    later = [d.isoformat() for d in location_days(folder) if d.isoformat() >= "2024-01-01"]
    # MEMORY_PARTITION_START unset: a load now starts at the old file's day (the tick indexed
    # it), so its day waits for the reload: the days there are partitions for are requested,
    # the cursor stays and the next tick asks for the same runs again (deduplicated by run key)
    monkeypatch.setattr(location, "_settings", replace(location.location_settings(), partition_start=None))
    waiting = sensor_context(database_url, None, folder)
    requests = transcript_files_sensor(waiting)
    assert sorted(r.partition_key for r in requests) == later and waiting.cursor is None
    assert [r.run_key for r in transcript_files_sensor(sensor_context(database_url, None, folder))] == \
        [r.run_key for r in requests]
    # MEMORY_PARTITION_START set: the day is left out, named in a warning, and the cursor moves on
    monkeypatch.setattr(location, "_settings", replace(location.location_settings(), partition_start=date(2024, 1, 1)))
    named = sensor_context(database_url, None, folder)
    assert sorted(r.partition_key for r in transcript_files_sensor(named)) == later and named.cursor is not None


def test_days_before_the_first_partition_say_what_to_do(database_url):
    from assets.automation import days_before_start

    fixed = date(2024, 1, 1)  # MEMORY_PARTITION_START
    assert days_before_start("2024-01-01", [date(2024, 1, 1), date(2024, 2, 1)], fixed, database_url) is None
    message, after_reload = days_before_start("2024-01-01", [date(2023, 12, 30), date(2023, 12, 31)], fixed,
                                              database_url)
    assert not after_reload and message == (
        "transcripts of 2 days from 2023-12-30 to 2023-12-31 lie before the first partition, 2024-01-01, and are "
        "not run: set MEMORY_PARTITION_START=2023-12-30, reload the code location and backfill them (or run "
        "`memory-pipelines run --start 2023-12-30`)")
    # unset, an empty database: a load now starts at 2024-01-01 too
    assert days_before_start("2024-01-01", [date(2023, 12, 30)], None, database_url)[1] is False
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO messages (session_id, seq, user_id, role, content, ts, content_hash, source_file, "
                     "source_line, ingested_run_id) VALUES ('s', 1, 'ann', 'user', 'hi', '2023-12-29T12:00:00Z', "
                     "'h', 'f', 1, 'r')")
    assert days_before_start("2024-01-01", [date(2023, 12, 30)], None, database_url) == (
        "transcripts of 2023-12-30 lie before the first partition, 2024-01-01: reload the code location (its "
        "partitions then start at 2023-12-29) and the next tick requests their runs", True)

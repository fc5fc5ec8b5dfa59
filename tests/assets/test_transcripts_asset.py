"""The `transcripts` asset materialized against the real embedded PostgreSQL."""

from __future__ import annotations

import json
import shutil
from datetime import date, timedelta

import dagster as dg
import psycopg
import pytest

from assets.ingestion import transcripts
from memory_pipelines.config import SAMPLE_BAD_INPUT, SAMPLE_TRANSCRIPTS
from tests.helpers import (
    content_fingerprints, materialization_metadata, materialize_partitions, materialize_range, pipeline_resources,
    table_fingerprints,
)

SAMPLE_DAYS = [(date(2026, 10, 1) + timedelta(days=i)).isoformat() for i in range(14)]
ARCHIVE = ["messages", "sessions", "quarantine"]


def _count(url, statement, params=None):
    with psycopg.connect(url) as conn:
        return conn.execute(statement, params).fetchone()[0]


def test_sample_ingests_every_valid_line_and_counts_add_up(database_url):
    results = materialize_partitions([transcripts], SAMPLE_DAYS, database_url, SAMPLE_TRANSCRIPTS)
    totals = {"read": 0, "stored": 0, "duplicate": 0, "quarantined": 0}
    for result in results:
        meta = materialization_metadata(result, "transcripts")
        assert meta["read"] == meta["stored"] + meta["duplicate"] + meta["quarantined"]
        for key in totals:
            totals[key] += meta[key]
    assert totals["quarantined"] == 0 and totals["duplicate"] == 0
    assert totals["stored"] == _count(database_url, "SELECT count(*) FROM messages") == 655
    sessions = _count(database_url, "SELECT count(*) FROM sessions")
    assert sessions == _count(database_url, "SELECT count(DISTINCT session_id) FROM messages") >= 40
    assert _count(database_url, "SELECT count(DISTINCT user_id) FROM sessions") >= 5
    # sessions agree with their messages
    assert _count(database_url, """
        SELECT count(*) FROM sessions s JOIN LATERAL (
            SELECT count(*) n, min(ts) f, max(ts) l FROM messages m WHERE m.session_id = s.session_id) a ON true
        WHERE a.n <> s.message_count OR a.f <> s.first_message_at OR a.l <> s.last_active""") == 0
    # a session crossing midnight is split across two partitions but whole in the archive
    assert _count(database_url, "SELECT count(*) FROM sessions WHERE first_message_at::date <> last_active::date") >= 1


def test_rematerializing_leaves_identical_tables(database_url):
    instance = dg.DagsterInstance.ephemeral()
    materialize_partitions([transcripts], SAMPLE_DAYS, database_url, SAMPLE_TRANSCRIPTS, instance)
    before = table_fingerprints(database_url, ARCHIVE)
    again = materialize_partitions([transcripts], SAMPLE_DAYS[3:6], database_url, SAMPLE_TRANSCRIPTS, instance)
    assert table_fingerprints(database_url, ARCHIVE) == before
    meta = materialization_metadata(again[0], "transcripts")
    assert meta["stored"] == 0 and meta["duplicate"] == meta["read"] > 0


def test_bad_input_is_quarantined_with_reasons_and_nothing_is_lost(database_url, tmp_path):
    folder = tmp_path / "bad"
    shutil.copytree(SAMPLE_BAD_INPUT, folder)
    [result] = materialize_partitions([transcripts], ["2026-10-01"], database_url, folder)
    meta = materialization_metadata(result, "transcripts")
    assert meta["read"] == meta["stored"] + meta["duplicate"] + meta["quarantined"]
    with psycopg.connect(database_url) as conn:
        reasons = dict(conn.execute("SELECT reason, count(*) FROM quarantine GROUP BY reason").fetchall())
        stored = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        dup_row = conn.execute(
            "SELECT content FROM messages WHERE session_id = 'bad-dup' AND seq = 2").fetchone()
        owner = conn.execute("SELECT user_id FROM sessions WHERE session_id = 'bad-owner'").fetchone()
    assert dup_row == ("Port set to 8080.",)  # the conflicting re-send did not overwrite it
    assert owner == ("mallory",)  # eve could not write into mallory's session
    assert reasons["conflicting_duplicate"] == 1 and reasons["user_mismatch"] == 1
    # the two undatable files (broken history.json, corrupt parquet) join the one day that has
    # readable records, never a partition of their own by modification time
    assert reasons["malformed_json"] >= 2 and reasons["unreadable_file"] == 1
    assert meta["quarantined"] == sum(reasons.values())
    assert meta["duplicate"] == 1  # the identical re-send
    assert stored == meta["stored"]
    lines = sum(sum(1 for line in p.read_bytes().split(b"\n") if line.strip()) for p in folder.glob("*.jsonl"))
    assert lines + 2 == meta["read"]
    assert meta["quarantined_by_reason"]["invalid_timestamp"] == 3


def test_a_late_file_for_a_past_day_is_picked_up_by_rerunning_that_day(database_url, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS, folder)
    materialize_partitions([transcripts], ["2026-10-04"], database_url, folder)
    before = _count(database_url, "SELECT count(*) FROM messages")
    late = [{"session_id": "late-1", "user_id": "alice", "seq": i, "role": "user", "content": f"late {i}",
             "ts": f"2026-10-04T20:0{i}:00Z"} for i in (1, 2)]
    (folder / "late.jsonl").write_text("".join(json.dumps(r) + "\n" for r in late))
    materialize_partitions([transcripts], ["2026-10-04"], database_url, folder)
    assert _count(database_url, "SELECT count(*) FROM messages") == before + 2
    assert _count(database_url, "SELECT message_count FROM sessions WHERE session_id = 'late-1'") == 2


def test_missing_transcript_folder_fails_the_run_clearly(database_url, tmp_path):
    with pytest.raises(Exception, match="does not exist"):
        materialize_partitions([transcripts], ["2026-10-01"], database_url, tmp_path / "missing")


def test_previews_in_metadata_are_pii_redacted(database_url, tmp_path):
    folder = tmp_path / "pii"
    folder.mkdir()
    lines = [{"session_id": "s-pii", "user_id": "paula", "agent_id": "navi", "seq": 1, "role": "user",
              "content": "mail me at paula.k@example.org, card 4111 1111 1111 1111", "ts": "2026-10-03T09:00:00Z"},
             {"session_id": "s-pii", "user_id": "paula", "agent_id": "navi", "seq": 2, "role": "assistant",
              "content": "Noted: paula.k@example.org", "ts": "2026-10-03T09:00:05Z"}]
    (folder / "paula.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    [result] = materialize_partitions([transcripts], ["2026-10-03"], database_url, folder)
    preview = materialization_metadata(result, "transcripts")["preview"]
    assert "paula.k@example.org" not in preview and "4111" not in preview
    assert "[REDACTED:email]" in preview and "[REDACTED:card]" in preview
    # the archive itself keeps the text verbatim: redaction is for what leaves the database
    assert _count(database_url, "SELECT count(*) FROM messages WHERE content LIKE %s", ("%paula.k@example.org%",)) == 2


def test_a_range_stopped_on_a_later_day_keeps_the_days_it_committed(make_database, tmp_path):
    url, clean = make_database(), make_database()
    first, last = SAMPLE_DAYS[0], SAMPLE_DAYS[2]
    # the database refuses the range's second day (a failure outside the stage's own code)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"""CREATE FUNCTION refuse_second_day() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.ts >= '{SAMPLE_DAYS[1]}T00:00:00Z' THEN RAISE EXCEPTION 'refused for the test'; END IF;
                RETURN NEW;
            END $$""")
        conn.execute("CREATE TRIGGER refuse_second_day BEFORE INSERT ON messages FOR EACH ROW "
                     "EXECUTE FUNCTION refuse_second_day()")
    resources = pipeline_resources(url, SAMPLE_TRANSCRIPTS)
    stopped = materialize_range([transcripts], first, last, resources, raise_on_error=False)
    assert not stopped.success

    # the first day stayed, whole, and nothing of the later days got in
    first_day = f"ts < '{SAMPLE_DAYS[1]}T00:00:00Z'"
    stored = _count(url, "SELECT count(*) FROM messages")
    assert stored > 0 and stored == _count(url, f"SELECT count(*) FROM messages WHERE {first_day}")
    materialize_partitions([transcripts], [first], clean, SAMPLE_TRANSCRIPTS)
    assert stored == _count(clean, f"SELECT count(*) FROM messages WHERE {first_day}")

    # run again without the fault: the same archive as a run that never stopped
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TRIGGER refuse_second_day ON messages")
    assert materialize_range([transcripts], first, last, resources).success
    assert materialize_range([transcripts], first, last, pipeline_resources(clean, SAMPLE_TRANSCRIPTS)).success
    assert content_fingerprints(url, ARCHIVE) == content_fingerprints(clean, ARCHIVE)

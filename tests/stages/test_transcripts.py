"""Stage `transcripts` run directly: read = stored + duplicate + quarantined + forgotten +
superseded, the archive holds what it stored, and a second run of the same window stores
nothing new."""

from __future__ import annotations

import json

from memory_pipelines.db.connection import get_pool
from memory_pipelines.lifecycle import forget
from tests.stages.chain import (
    SAMPLE_DAYS, rows, run_stage, sample_files, sample_inventory, scalar, table_contents,
)


def accounted(counts) -> int:
    return counts.stored + counts.duplicate + counts.quarantined + counts.forgotten + counts.superseded


def test_the_sample_is_archived_whole_and_a_second_run_finds_only_duplicates(pool, database_url):
    records, sessions = sample_inventory()
    total = sum(records.values())
    report = run_stage(pool, "transcripts", SAMPLE_DAYS)
    counts = report.counts
    assert counts.read == total and accounted(counts) == counts.read
    assert (counts.stored, counts.duplicate, counts.quarantined, counts.forgotten, counts.superseded) == (
        total, 0, 0, 0, 0)
    assert counts.files_listed == counts.files_indexed == sample_files()
    assert counts.files_unreadable == counts.files_skipped == counts.files_gone == 0
    assert counts.sessions_touched == len(sessions) and report.sessions == sessions
    assert counts.table_rows == {"messages": total, "sessions": len(sessions), "quarantine": 0}
    assert report.failures == [] and report.warnings == []
    # the tables hold what the counts say
    assert scalar(database_url, "SELECT count(*) FROM messages") == total
    assert dict(rows(database_url, "SELECT user_id, count(*) FROM messages GROUP BY 1")) == records
    assert {r[0] for r in rows(database_url, "SELECT session_id FROM sessions")} == sessions
    assert scalar(database_url, "SELECT sum(message_count) FROM sessions") == total
    assert scalar(database_url, "SELECT count(*) FROM messages WHERE ingested_run_id <> 'stage-test'") == 0

    before = table_contents(database_url)
    again = run_stage(pool, "transcripts", SAMPLE_DAYS, run_id="again").counts
    assert (again.read, again.stored, again.duplicate, again.quarantined) == (total, 0, total, 0)
    assert again.files_indexed == 0 and again.sessions_touched == 0
    assert again.table_rows == counts.table_rows
    assert table_contents(database_url) == before


def test_a_day_stores_only_its_own_records_and_the_range_then_the_rest(pool, database_url):
    records, _ = sample_inventory()
    total = sum(records.values())
    day = run_stage(pool, "transcripts", "2026-10-03").counts
    assert day.stored == day.read == accounted(day) > 0
    assert scalar(database_url, "SELECT count(*) FROM messages") == day.stored
    assert scalar(database_url, "SELECT count(*) FROM messages WHERE ts < '2026-10-03T00:00:00Z' "
                                "OR ts >= '2026-10-04T00:00:00Z'") == 0
    whole = run_stage(pool, "transcripts", SAMPLE_DAYS, run_id="whole").counts
    assert (whole.read, whole.duplicate, whole.stored) == (total, day.stored, total - day.stored)
    assert scalar(database_url, "SELECT count(*) FROM messages WHERE ts >= '2026-10-03T00:00:00Z' "
                                "AND ts < '2026-10-04T00:00:00Z'") == day.stored


def test_day_by_day_reads_each_record_once_and_ends_as_the_range(pool, database_url, make_database):
    records, _ = sample_inventory()
    by_day = [run_stage(pool, "transcripts", key).counts for key in SAMPLE_DAYS]
    assert sum(c.read for c in by_day) == sum(c.stored for c in by_day) == sum(records.values())
    assert all(c.read == accounted(c) for c in by_day)
    ranged = make_database()
    run_stage(get_pool(ranged), "transcripts", SAMPLE_DAYS)
    tables = ["messages", "sessions", "quarantine"]
    assert table_contents(database_url, tables) == table_contents(ranged, tables)


def test_a_forgotten_users_records_are_counted_and_skipped(pool, database_url):
    records, _ = sample_inventory()
    with pool.connection() as conn:
        forget(conn, "wei")
    counts = run_stage(pool, "transcripts", SAMPLE_DAYS).counts
    assert counts.forgotten == records["wei"] > 0
    assert counts.stored == sum(records.values()) - records["wei"] and accounted(counts) == counts.read
    assert scalar(database_url, "SELECT count(*) FROM messages WHERE user_id = 'wei'") == 0


def record(seq, role, content, ts="2026-10-01T10:00:00Z", **more):
    return {"session_id": "s1", "user_id": "ann", "seq": seq, "role": role, "content": content, "ts": ts, **more}


def test_refused_records_are_quarantined_by_reason_and_resolved_once_the_file_is_clean(pool, database_url, tmp_path):
    good = [record(1, "user", "How do I list files?", "2026-10-01T10:00:00Z"),
            record(2, "assistant", "Use ls -la.", "2026-10-01T10:01:00Z"),
            record(3, "user", "And hidden ones?", "2026-10-01T10:02:00Z")]
    lines = [json.dumps(r) for r in good] + [
        json.dumps(good[0]),  # line 4: sent again, the same: a duplicate
        json.dumps({**good[1], "content": "something else"}),  # 5: the same key, other content
        "{not json",  # 6
        json.dumps({**good[0], "seq": 9, "role": "wizard"}),  # 7
        json.dumps(record(10, "user", "the next day", "2026-10-02T09:00:00Z")),  # 8: outside the window
        json.dumps({k: v for k, v in record(11, "user", "no session").items() if k != "session_id"}),  # 9
    ]
    (tmp_path / "ann.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = run_stage(pool, "transcripts", "2026-10-01", source=tmp_path)
    counts = report.counts
    assert (counts.read, counts.stored, counts.duplicate, counts.quarantined) == (8, 3, 1, 4)
    assert accounted(counts) == counts.read
    refused = {"conflicting_duplicate": 1, "malformed_json": 1, "unknown_role": 1, "missing_field": 1}
    assert dict(counts.quarantined_by_reason) == refused
    assert counts.table_rows == {"messages": 3, "sessions": 1, "quarantine": 4}
    assert rows(database_url, "SELECT source_line, reason FROM quarantine WHERE resolved_at IS NULL ORDER BY 1") == [
        (5, "conflicting_duplicate"), (6, "malformed_json"), (7, "unknown_role"), (9, "missing_field")]
    # the first of two conflicting records wins
    assert rows(database_url, "SELECT seq, role, content FROM messages ORDER BY seq") == [
        (1, "user", "How do I list files?"), (2, "assistant", "Use ls -la."), (3, "user", "And hidden ones?")]
    assert rows(database_url, "SELECT session_id, user_id, message_count FROM sessions") == [("s1", "ann", 3)]

    before = table_contents(database_url)
    again = run_stage(pool, "transcripts", "2026-10-01", source=tmp_path, run_id="again").counts
    assert (again.read, again.stored, again.duplicate, again.quarantined) == (8, 0, 4, 4)
    assert dict(again.quarantined_by_reason) == refused and again.refusals_resolved == 0
    assert table_contents(database_url) == before  # refused again: the same four open refusals

    # the file fixed: its earlier refusals are over (a conflict with the archive aside: the
    # archive still holds other content than what was refused); the range reaches the next day
    (tmp_path / "ann.jsonl").write_text(
        "\n".join(json.dumps(r) for r in [*good, record(10, "user", "the next day", "2026-10-02T09:00:00Z")]) + "\n",
        encoding="utf-8")
    fixed = run_stage(pool, "transcripts", ["2026-10-01", "2026-10-02"], source=tmp_path, run_id="fixed").counts
    assert (fixed.read, fixed.stored, fixed.duplicate, fixed.quarantined) == (4, 1, 3, 0)
    assert fixed.files_indexed == 1 and fixed.refusals_resolved == 3
    assert rows(database_url, "SELECT source_line, reason FROM quarantine WHERE resolved_at IS NULL") == [
        (5, "conflicting_duplicate")]
    assert scalar(database_url, "SELECT count(*) FROM quarantine WHERE resolved_by_run = 'fixed'") == 3
    assert rows(database_url, "SELECT message_count FROM sessions") == [(4,)]

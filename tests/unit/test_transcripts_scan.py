"""DuckDB scanning and validation of transcript files (no database)."""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import jsonschema
import pytest

from memory_pipelines.config import PACKAGE_DIR, SAMPLE_BAD_INPUT, SAMPLE_TRANSCRIPTS
from memory_pipelines.records import QuarantineReason, TimeWindow
from memory_pipelines.sources import SourceSettings, open_source
from memory_pipelines.sources.base import NotATranscriptFile
from memory_pipelines.sources.files import MemoryIndex
from memory_pipelines.core.transcript_scan import describe_skipped
from tests.helpers import location_days, scan_location as scan_transcripts


def _source(location):
    return open_source(SourceSettings(location=str(location)), MemoryIndex())

ALL_TIME = TimeWindow(datetime(2000, 1, 1, tzinfo=UTC), datetime(2200, 1, 1, tzinfo=UTC))
SCHEMA = json.loads((PACKAGE_DIR / "schemas" / "transcript_message.schema.json").read_text())

# file -> reasons of the records it must quarantine (the rest of its lines are valid)
EXPECTED_BAD = {
    "malformed_json.jsonl": ["malformed_json"],
    "missing_field.jsonl": ["missing_field", "missing_field"],
    "invalid_type.jsonl": ["invalid_type"] * 3,
    "unknown_role.jsonl": ["unknown_role"],
    "invalid_timestamp.jsonl": ["invalid_timestamp"] * 3,
    "invalid_utf8.jsonl": ["invalid_utf8"],
    "nul_byte.jsonl": ["nul_byte", "nul_byte"],
    "too_large.jsonl": ["too_large"],
    "not_an_object.jsonl": ["not_an_object", "not_an_object"],
    "conflicting_duplicate.jsonl": [],  # refused later, against the archive (see test_ingest_plan)
    "user_mismatch.jsonl": [],
    "broken_history/history.json": ["malformed_json"],
    "corrupt.parquet": ["unreadable_file"],
}


def _msg(seq, ts, **extra):
    record = {"session_id": "s1", "user_id": "u1", "seq": seq, "role": "user", "content": f"m{seq}", "ts": ts}
    record.update(extra)
    return record


def _write_jsonl(path: Path, records) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_every_bad_input_file_is_quarantined_with_its_reason():
    scan = scan_transcripts(SAMPLE_BAD_INPUT, ALL_TIME)
    got: dict[str, list[str]] = {}
    for record in scan.quarantined:
        got.setdefault(record.source_file, []).append(str(record.reason))
        assert record.detail, record
    assert {f: sorted(v) for f, v in got.items()} == {f: sorted(v) for f, v in EXPECTED_BAD.items() if v}
    # nothing lost: every non-blank line of every JSONL file is either a message or refused
    lines = sum(
        sum(1 for line in p.read_bytes().split(b"\n") if line.strip())
        for p in SAMPLE_BAD_INPUT.glob("*.jsonl")
    )
    jsonl_quarantined = sum(1 for r in scan.quarantined if r.source_file.endswith(".jsonl"))
    assert len(scan.messages) + jsonl_quarantined == lines


def test_valid_lines_of_a_bad_file_still_load():
    scan = scan_transcripts(SAMPLE_BAD_INPUT / "malformed_json.jsonl", ALL_TIME)
    assert [m.seq for m in scan.messages] == [1, 3]
    assert [r.source_line for r in scan.quarantined] == [2]


def test_quarantine_keeps_raw_text_capped_and_full_size():
    scan = scan_transcripts(SAMPLE_BAD_INPUT / "too_large.jsonl", ALL_TIME)
    [big] = scan.quarantined
    assert big.reason is QuarantineReason.TOO_LARGE
    assert len(big.raw) == 4000 and big.raw_bytes > 1_000_000
    assert "1000000" in big.detail


def test_size_cap_is_configurable(tmp_path):
    path = _write_jsonl(tmp_path / "a.jsonl", [_msg(1, "2026-10-01T10:00:00Z", content="x" * 500)])
    assert len(scan_transcripts(path, ALL_TIME, max_bytes=10_000).messages) == 1
    assert [r.reason for r in scan_transcripts(path, ALL_TIME, max_bytes=200).quarantined] == [QuarantineReason.TOO_LARGE]


def test_timestamps_offsets_naive_zone_and_epoch_nanoseconds(tmp_path):
    path = _write_jsonl(tmp_path / "t.jsonl", [
        _msg(1, "2026-10-01T10:00:00Z"),
        _msg(2, "2026-10-01T12:00:00+02:00"),
        _msg(3, "2026-10-01T12:00:00"),  # no zone: read in the configured zone
        _msg(4, 1759313045123456789),  # epoch ns: 2025-10-01T10:04:05.123456Z (microseconds kept)
    ])
    berlin = {m.seq: m.ts for m in scan_transcripts(path, ALL_TIME, timezone="Europe/Berlin").messages}
    assert berlin[1] == datetime(2026, 10, 1, 10, tzinfo=UTC)
    assert berlin[2] == datetime(2026, 10, 1, 10, tzinfo=UTC)
    assert berlin[3] == datetime(2026, 10, 1, 10, tzinfo=UTC)  # CEST is UTC+2
    assert berlin[4] == datetime(2025, 10, 1, 10, 4, 5, 123456, tzinfo=UTC)
    utc = {m.seq: m.ts for m in scan_transcripts(path, ALL_TIME, timezone="UTC").messages}
    assert utc[3] == datetime(2026, 10, 1, 12, tzinfo=UTC)


def test_window_filter_is_half_open_on_utc_days(tmp_path):
    path = _write_jsonl(tmp_path / "w.jsonl", [
        _msg(1, "2026-10-01T23:59:59.999999Z"),
        _msg(2, "2026-10-02T00:00:00Z"),
        _msg(3, "2026-10-02T01:30:00+02:00"),  # 23:30 UTC on the 1st
    ])
    day1 = TimeWindow(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 2, tzinfo=UTC))
    assert [m.seq for m in scan_transcripts(path, day1).messages] == [1, 3]
    day2 = TimeWindow(day1.end, day1.end + timedelta(days=1))
    assert [m.seq for m in scan_transcripts(path, day2).messages] == [2]


def test_undatable_record_follows_its_neighbours_day(tmp_path):
    path = tmp_path / "n.jsonl"
    path.write_text(
        json.dumps(_msg(1, "2026-10-03T08:00:00Z")) + "\n{broken\n" + json.dumps(_msg(3, "2026-10-05T08:00:00Z")) + "\n"
    )
    day3 = TimeWindow(datetime(2026, 10, 3, tzinfo=UTC), datetime(2026, 10, 4, tzinfo=UTC))
    scan = scan_transcripts(path, day3)
    assert [m.seq for m in scan.messages] == [1]
    assert [(r.source_line, r.reason) for r in scan.quarantined] == [(2, QuarantineReason.MALFORMED_JSON)]


def _day(day: int) -> TimeWindow:
    start = datetime(2026, 10, day, tzinfo=UTC)
    return TimeWindow(start, start + timedelta(days=1))


@pytest.mark.parametrize("mtime_day, expected_day", [
    (7, 3),  # nearer the 3rd than the 12th
    (9, 12),
    (20, 12),  # after the last readable day
    (2, 3),  # before the first
])
def test_wholly_undatable_file_goes_to_the_readable_day_nearest_its_modification_time(tmp_path, mtime_day,
                                                                                         expected_day):
    """Never a partition of its own: the day with readable records nearest the file's date."""
    broken = tmp_path / "h" / "history.json"
    shutil.copytree(SAMPLE_BAD_INPUT / "broken_history", broken.parent)
    moment = datetime(2026, 10, mtime_day, 12, tzinfo=UTC).timestamp()
    os.utime(broken, (moment, moment))
    _write_jsonl(tmp_path / "a.jsonl", [_msg(1, "2026-10-03T08:00:00Z"), _msg(2, "2026-10-12T08:00:00Z")])
    assert [r.reason for r in scan_transcripts(tmp_path, _day(expected_day)).quarantined] == \
        [QuarantineReason.MALFORMED_JSON]
    assert location_days(tmp_path) == [date(2026, 10, 3), date(2026, 10, 12)]
    found = _source(tmp_path).inventory()
    assert (found.first_day, found.last_day, found.days) == (date(2026, 10, 3), date(2026, 10, 12), 2)


def test_a_tie_between_two_readable_days_goes_to_the_earlier(tmp_path):
    broken = tmp_path / "history.json"
    broken.write_text("[{")
    moment = datetime(2026, 10, 5, 12, tzinfo=UTC).timestamp()
    os.utime(broken, (moment, moment))
    _write_jsonl(tmp_path / "a.jsonl", [_msg(1, "2026-10-03T08:00:00Z"), _msg(2, "2026-10-07T08:00:00Z")])
    assert [r.source_file for r in scan_transcripts(tmp_path, _day(3)).quarantined] == ["history.json"]


def test_a_location_without_any_readable_time_is_undated_and_opens_no_day(tmp_path):
    broken = tmp_path / "history.json"
    broken.write_text("[{")
    found = _source(tmp_path).inventory()
    assert (found.first_day, found.records, found.refused, found.undated) == (None, 1, 1, 1)
    assert location_days(tmp_path) == [] and found.last_day is None
    assert scan_transcripts(tmp_path, _day(3)).quarantined == ()
    # the run's own range takes them
    [record] = scan_transcripts(tmp_path, _day(3), include_undated=True).quarantined
    assert (record.source_file, record.reason) == ("history.json", QuarantineReason.MALFORMED_JSON)
    assert [r.source_file for r in _source(tmp_path).undated_records()] == ["history.json"]
    # undated records (every one refused) are read a file at a time, never the location at once
    (tmp_path / "more.jsonl").write_text("not json\n{}\n")
    plan = _source(tmp_path).plan(_day(3), include_undated=True)
    [window] = plan.windows
    scans = list(plan.read(window))
    assert [(s.files, sorted({q.source_file for q in s.quarantined})) for s in scans] == [
        (1, ["history.json"]), (1, ["more.jsonl"])]


def test_a_file_named_directly_must_be_of_a_transcript_kind(tmp_path):
    for name, data in (("notes.csv", b"a,b\n1,2\n"), ("picture.png", b"\x89PNG\r\n\x1a\n"), ("README", b"hi")):
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(NotATranscriptFile, match=f"{name} is not a transcript file: accepted are .jsonl"):
            scan_transcripts(path, ALL_TIME)
    array = tmp_path / "export.json"  # any .json holding an array of messages is read
    array.write_text(json.dumps([_msg(1, "2026-10-03T08:00:00Z"), _msg(2, "2026-10-03T08:01:00Z")]))
    assert [m.seq for m in scan_transcripts(array, ALL_TIME).messages] == [1, 2]
    not_array = tmp_path / "config.json"
    not_array.write_text('{"a": 1}')
    [refused] = scan_transcripts(not_array, ALL_TIME, include_undated=True).quarantined
    assert refused.reason == QuarantineReason.NOT_AN_OBJECT and "JSON array of messages" in refused.detail


def test_files_of_no_transcript_kind_in_a_folder_are_skipped_and_listed(tmp_path):
    _write_jsonl(tmp_path / "a.jsonl", [_msg(1, "2026-10-03T08:00:00Z")])
    for n in range(12):
        (tmp_path / "notes" / f"n{n:02}.csv").parent.mkdir(exist_ok=True)
        (tmp_path / "notes" / f"n{n:02}.csv").write_text("x")
    scan = scan_transcripts(tmp_path, ALL_TIME)
    assert len(scan.messages) == 1 and scan.files == 1
    assert scan.skipped_files == tuple(f"notes/n{n:02}.csv" for n in range(12))
    line = describe_skipped(scan.skipped_files)
    assert line.startswith("12 file(s) of no transcript kind skipped: notes/n00.csv, ") and "and 2 more" in line
    assert "notes/n10.csv" not in line


def test_parquet_and_history_json_read_like_jsonl(tmp_path):
    records = [_msg(1, "2026-10-01T10:00:00Z"), _msg(2, "2026-10-01T10:01:00Z", role="assistant",
                                                    tool_name="shell", tool_args={"command": "ls"}, tool_call_id="c1")]
    jsonl = _write_jsonl(tmp_path / "j" / "a.jsonl", records)
    history = tmp_path / "h" / "s1" / "history.json"
    history.parent.mkdir(parents=True)
    history.write_text(json.dumps(records))
    parquet = tmp_path / "p" / "a.parquet"
    parquet.parent.mkdir()
    with duckdb.connect() as con:
        con.execute(
            "COPY (SELECT session_id, user_id, seq, role, content, ts, tool_name, "
            "CAST(tool_args AS VARCHAR) AS tool_args, tool_call_id FROM read_json($p, columns={"
            "session_id: 'VARCHAR', user_id: 'VARCHAR', seq: 'BIGINT', role: 'VARCHAR', content: 'VARCHAR', "
            "ts: 'VARCHAR', tool_name: 'VARCHAR', tool_args: 'JSON', tool_call_id: 'VARCHAR'})) TO '" + str(parquet)
            + "' (FORMAT parquet)", {"p": str(jsonl)})

    def shape(root):
        return [(m.session_id, m.seq, m.role, m.content, m.ts, m.tool_name, m.tool_args, m.content_hash)
                for m in scan_transcripts(root, ALL_TIME).messages]

    assert shape(jsonl.parent) == shape(history.parent.parent) == shape(parquet.parent)
    assert shape(jsonl.parent)[1][6] == {"command": "ls"}


def test_content_hash_tells_resent_from_changed(tmp_path):
    path = _write_jsonl(tmp_path / "d.jsonl", [
        _msg(1, "2026-10-01T10:00:00Z"), _msg(1, "2026-10-01T10:00:00Z"), _msg(1, "2026-10-01T10:00:00Z", content="other"),
    ])
    hashes = [m.content_hash for m in scan_transcripts(path, ALL_TIME).messages]
    assert hashes[0] == hashes[1] != hashes[2]


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeError, match="does not exist"):
        scan_transcripts(tmp_path / "nope", ALL_TIME)


def test_json_schema_agrees_with_the_validator():
    """Sample lines pass the shipped JSON Schema; lines refused for field reasons fail it."""
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for path in (PACKAGE_DIR / "sample_data" / "transcripts").rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            validator.validate(json.loads(line))
    field_reasons = {"missing_field", "invalid_type", "unknown_role", "invalid_timestamp", "not_an_object"}
    refused = Counter()
    for record in scan_transcripts(SAMPLE_BAD_INPUT, ALL_TIME).quarantined:
        if str(record.reason) in field_reasons and record.source_line > 0:
            line = (SAMPLE_BAD_INPUT / record.source_file).read_text().splitlines()[record.source_line - 1]
            assert not validator.is_valid(json.loads(line)), line
            refused[str(record.reason)] += 1
    assert set(refused) == field_reasons


def test_a_forks_parent_and_fork_point_are_read_and_ill_typed_ones_refused(tmp_path):
    base = {"session_id": "f1", "user_id": "u1", "role": "user", "content": "hi", "ts": "2026-10-01T10:00:00Z"}
    records = [{**base, "seq": 4, "parent_session_id": "s1", "fork_seq": 3},
               {**base, "seq": 5},
               {**base, "seq": 6, "parent_session_id": "s1"},
               {**base, "seq": 7, "parent_session_id": "s1", "fork_seq": "3"},
               {**base, "seq": 8, "parent_session_id": "", "fork_seq": 3},
               {**base, "seq": 9, "parent_session_id": "s1", "fork_seq": -1}]
    path = tmp_path / "fork.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    scan = scan_transcripts(path, ALL_TIME)
    assert [(m.seq, m.parent_session_id, m.fork_seq) for m in scan.messages] == [(4, "s1", 3), (5, None, None)]
    details = {r.seq: r.detail for r in scan.quarantined}
    assert all(r.reason is QuarantineReason.INVALID_TYPE for r in scan.quarantined)
    assert "parent_session_id and fork_seq go together" in details[6]
    assert "fork_seq must be a non-negative integer" in details[7] and "fork_seq must be" in details[9]
    assert "parent_session_id must be a non-empty string" in details[8]


def test_a_file_unreadable_after_indexing_is_quarantined_once_and_read_again_later(tmp_path, monkeypatch):
    """A file indexed, then gone before its days are read: one refused record for the whole
    plan (not one per day it covers), and the failure is not kept: the next plan reads it."""
    from memory_pipelines.sources import files

    records = [_msg(1, "2026-10-03T09:00:00Z"), _msg(2, "2026-10-04T09:00:00Z")]
    path = _write_jsonl(tmp_path / "two_days.jsonl", records)
    source = _source(tmp_path)
    plan = source.plan(ALL_TIME, include_undated=True)
    assert len(plan.windows) == 2 and plan.unreadable == ()
    # the file leaves the validated files kept in memory (as a large one does), then the disk
    monkeypatch.setattr(files, "_validated", files._ValidatedFiles())
    path.unlink()
    scans = [scan for w in plan.windows for scan in plan.read(w)]
    refused = [q for s in scans for q in s.quarantined]
    assert [(q.source_file, q.source_line, q.reason) for q in refused] == [
        ("two_days.jsonl", 0, QuarantineReason.UNREADABLE_FILE)]
    assert "two_days.jsonl" in refused[0].detail and not any(s.messages for s in scans)
    _write_jsonl(path, records)
    again = source.plan(ALL_TIME, include_undated=True)
    assert [m.seq for w in again.windows for scan in again.read(w) for m in scan.messages] == [1, 2]


def test_small_files_are_validated_in_batches_and_read_back_alike(tmp_path, monkeypatch):
    """Thirty small files: indexing validates them in one pass (a pass costs tens of
    milliseconds whatever its size), and a day whose files left the kept batches is read in
    one pass too, with the records a file-by-file read gives."""
    from memory_pipelines.sources import files

    for n in range(30):
        _write_jsonl(tmp_path / f"u{n:02}.jsonl", [
            {**_msg(1, f"2026-10-0{3 + n % 2}T08:{n:02}:00Z"), "session_id": f"s{n}"},
            {**_msg(2, f"2026-10-0{3 + n % 2}T09:{n:02}:00Z"), "session_id": f"s{n}"}])
    passes = []
    real_validate = files.validate
    monkeypatch.setattr(files, "validate", lambda table, **kw: passes.append(table.num_rows) or real_validate(table, **kw))
    source = _source(tmp_path)
    plan = source.plan(ALL_TIME, include_undated=True)
    assert passes == [60] and len(plan.windows) == 2
    monkeypatch.setattr(files, "_validated", files._ValidatedFiles())  # nothing kept any more
    scans = [scan for w in plan.windows for scan in plan.read(w)]
    assert passes == [60, 30, 30]
    read = [(m.session_id, m.seq, m.ts) for s in scans for m in s.messages]
    assert sorted(read) == sorted((f"s{n}", q, m.ts) for n in range(30) for q in (1, 2)
                                  for m in scan_transcripts(tmp_path / f"u{n:02}.jsonl", ALL_TIME).messages if m.seq == q)
    assert len(read) == 60 and not any(s.quarantined for s in scans)


def test_kept_batches_leave_least_recently_read_first_once_over_the_budget(tmp_path):
    """The validated files a run keeps: over the budget, the batch read longest ago goes
    first (its connection closed) and the newest always stays."""
    from memory_pipelines.sources import files
    from memory_pipelines.core.transcript_scan import to_us

    source = _source(tmp_path)
    for day in ("03", "04", "05"):
        _write_jsonl(tmp_path / f"d{day}.jsonl", [_msg(1, f"2026-10-{day}T09:00:00Z", session_id=f"s{day}")])
    objects = {obj.name: obj for obj in source.store.list_objects().objects}
    kept = files._ValidatedFiles()
    params = {"start_us": to_us(ALL_TIME.start), "end_us": to_us(ALL_TIME.end), "undated": False}

    def keep(name):
        con = source._validate([(objects[name], source._read(objects[name])[1])])
        kept.keep(con, [source._key(objects[name], ())], 40, budget=100)
        return con

    def read(name) -> list[str]:
        return [row[0] for row in kept.rows([(source._key(objects[name], ()), name)], params).get(name, [])]

    first, second = keep("d03.jsonl"), keep("d04.jsonl")
    assert read("d03.jsonl") == ["d03.jsonl"]  # the first batch is now the one read last
    keep("d05.jsonl")  # 120 bytes kept > 100: one batch goes, the least recently read
    assert read("d04.jsonl") == [] and read("d03.jsonl") == ["d03.jsonl"] and read("d05.jsonl") == ["d05.jsonl"]
    with pytest.raises(duckdb.ConnectionException):
        second.execute("SELECT 1")
    first.execute("SELECT 1")
    # a batch larger than the whole budget still stays, alone
    big = source._validate([(objects["d04.jsonl"], source._read(objects["d04.jsonl"])[1])])
    kept.keep(big, [source._key(objects["d04.jsonl"], ())], 500, budget=100)
    assert read("d04.jsonl") == ["d04.jsonl"] and read("d03.jsonl") == [] and read("d05.jsonl") == []


def test_indexing_keeps_validated_only_the_batches_holding_the_planned_days(tmp_path, monkeypatch):
    """A plan's catalog validates every new file once; the batches with a day of the plan's
    window stay validated for reading it, the others are let go (a later plan for their
    days validates them again)."""
    from memory_pipelines.sources import files

    for day in ("03", "04", "05"):
        _write_jsonl(tmp_path / f"d{day}.jsonl", [_msg(1, f"2026-10-{day}T09:00:00Z", session_id=f"s{day}")])
    passes = []
    real_validate = files.validate
    monkeypatch.setattr(files, "validate", lambda table, **kw: passes.append(table.num_rows) or real_validate(table, **kw))
    monkeypatch.setattr(files, "SCAN_BATCH_BYTES", 1)  # a batch per file
    monkeypatch.setattr(files, "_validated", files._ValidatedFiles())
    source = _source(tmp_path)
    plan = source.plan(_day(4))
    assert passes == [1, 1, 1]  # indexing: a pass per file
    assert [m.session_id for w in plan.windows for s in plan.read(w) for m in s.messages] == ["s04"]
    assert passes == [1, 1, 1]  # day 4's batch was kept
    other = source.plan(_day(3))
    assert [m.session_id for w in other.windows for s in other.read(w) for m in s.messages] == ["s03"]
    assert passes == [1, 1, 1, 1]  # day 3's was not: validated again


def test_a_range_reads_its_days_ahead_at_once_and_each_day_as_read_alone(monkeypatch):
    """A plan over many days reads the rows of the files it keeps validated for several days
    in one query (a long range of small days is not a query a day), and each day gets what
    a plan of that day alone reads."""
    from memory_pipelines.sources import files

    queries = []
    read_rows = files.window_rows
    monkeypatch.setattr(files, "window_rows", lambda con, names, params: queries.append(params) or read_rows(
        con, names, params))
    days = location_days(SAMPLE_TRANSCRIPTS)
    source = open_source(SourceSettings(location=str(SAMPLE_TRANSCRIPTS)), MemoryIndex())
    plan = source.plan(TimeWindow(datetime.combine(days[0], datetime.min.time(), UTC),
                                  datetime.combine(days[-1] + timedelta(days=1), datetime.min.time(), UTC)))
    ranged = {w: list(plan.read(w)) for w in plan.windows}
    assert len(plan.windows) == len(days) > 5 and 0 < len(queries) < len(days) / 2
    alone = {w: list(source.plan(w).read(w)) for w in plan.windows}
    assert ranged == alone and sum(len(s.messages) for scans in ranged.values() for s in scans) > 0

"""Quarantine lists what is still refused: a later run that stores a refused record (a line
fixed, MEMORY_SOURCE_USER given) marks its refusal resolved, by when and which run; nothing
is deleted, a record still refused stays open, and the same refusal again is the same row."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import psycopg

from assets.ingestion import transcripts
from memory_pipelines.config import load
from memory_pipelines.cli import build_parser
from memory_pipelines.cli.inventory import cmd_quarantine
from memory_pipelines.db import transcripts as transcripts_db
from memory_pipelines.records import Message, QuarantinedRecord, QuarantineReason
from tests.helpers import materialization_metadata, materialize_partitions, table_fingerprints

DAY = "2026-10-14"


def _event(line: int, kind: str, message: dict, parent: int | None) -> dict:
    return {"type": kind, "sessionId": "s-events", "uuid": f"u{line}", "parentUuid": parent and f"u{parent}",
            "timestamp": f"{DAY}T09:31:{line:02d}Z", "message": message}


def write_folder(folder):
    """An agent-events log and an openai chat log that name no user, and a canonical file
    with a good line, one no setting helps (an unknown role) and one with a bad time."""
    (folder / "events").mkdir(parents=True)
    events = [
        _event(1, "user", {"role": "user", "content": "Why does test_retry fail?"}, None),
        # one assistant message written as two events (a text block, then a tool use): one turn
        _event(2, "assistant", {"id": "msg_a", "role": "assistant",
                                "content": [{"type": "text", "text": "Let me run it."}]}, 1),
        _event(3, "assistant", {"id": "msg_a", "role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "pytest -k retry"}}]}, 2),
        _event(4, "user", {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "1 failed"}]}, 3),
    ]
    (folder / "events" / "session.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (folder / "chat").mkdir()
    first = [{"role": "user", "content": "Will it rain on Saturday?"}, {"role": "assistant", "content": "No."}]
    lines = [{"session_id": "conv-1", "created_at": f"{DAY}T10:00:00Z", "messages": first},
             {"session_id": "conv-1", "created_at": f"{DAY}T10:05:00Z",
              "messages": [*first, {"role": "user", "content": "Sunday?"}, {"role": "assistant", "content": "Rain."}]}]
    (folder / "chat" / "log.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (folder / "notes").mkdir()
    canonical = [{"session_id": "s-ann", "user_id": "ann", "seq": 1, "role": "user", "content": "hi",
                  "ts": f"{DAY}T08:00:00Z"},
                 {"session_id": "s-ann", "user_id": "ann", "seq": 2, "role": "robot", "content": "beep",
                  "ts": f"{DAY}T08:00:05Z"},
                 {"session_id": "s-ann", "user_id": "ann", "seq": 3, "role": "user", "content": "later",
                  "ts": "at ten past eight"}]
    write_canonical(folder, canonical)


def write_canonical(folder, records: list[dict]) -> None:
    (folder / "notes" / "ann.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def quarantine(capsys, *args: str) -> list[dict]:
    assert cmd_quarantine(build_parser().parse_args(["quarantine", "--json", *args]), load()) == 0
    return json.loads(capsys.readouterr().out)


def test_a_later_run_that_stores_the_refused_records_resolves_their_refusals(database_url, tmp_path, capsys):
    folder = tmp_path / "t"
    write_folder(folder)
    [first] = materialize_partitions([transcripts], [DAY], database_url, folder)
    counts = materialization_metadata(first, "transcripts")
    assert counts["stored"] == 1 and counts["refusals_resolved"] == 0
    refused = quarantine(capsys)
    assert sorted((r["source_file"], r["source_line"], r["reason"]) for r in refused) == [
        ("chat/log.jsonl", 1, "unmapped"), ("chat/log.jsonl", 2, "unmapped"),
        *(("events/session.jsonl", line, "unmapped") for line in (1, 2, 3, 4)),
        ("notes/ann.jsonl", 2, "unknown_role"), ("notes/ann.jsonl", 3, "invalid_timestamp")]
    assert all("no user id" in r["detail"] for r in refused if r["reason"] == "unmapped")
    assert all(r["resolved_at"] is None for r in refused) and quarantine(capsys, "--resolved") == []
    before = table_fingerprints(database_url, ["quarantine", "messages"])
    materialize_partitions([transcripts], [DAY], database_url, folder)  # the same again: the same table
    assert table_fingerprints(database_url, ["quarantine", "messages"]) == before

    # the bad time fixed in place; the unknown role left as it is
    lines = [json.loads(line) for line in (folder / "notes" / "ann.jsonl").read_text().splitlines()]
    write_canonical(folder, [*lines[:2], {**lines[2], "ts": f"{DAY}T08:10:00Z"}])
    [second] = materialize_partitions([transcripts], [DAY], database_url, folder, source_user="noor")
    counts = materialization_metadata(second, "transcripts")
    # the log's four events are three turns (line 3 is part of line 2's: its refusal is over
    # as its file refuses nothing now); the chat's six records hold four messages (the second
    # line re-sends the first two); the canonical file's line 3 is stored where it was refused
    assert counts["stored"] == 8 and counts["quarantined"] == 1
    assert counts["refusals_resolved"] == 7 and isinstance(counts["refusals_resolved"], int)
    [still] = quarantine(capsys)
    assert (still["source_file"], still["source_line"], still["reason"]) == ("notes/ann.jsonl", 2, "unknown_role")
    assert still["id"] == next(r["id"] for r in refused if r["reason"] == "unknown_role")  # the same row
    resolved = quarantine(capsys, "--resolved")
    assert sorted(r["id"] for r in resolved) == sorted(r["id"] for r in refused if r["reason"] != "unknown_role")
    assert {r["resolved_by_run"] for r in resolved} == {second.run_id}
    assert all(r["resolved_at"] is not None and r["run_id"] == first.run_id for r in resolved)
    assert len(quarantine(capsys, "--all")) == 8  # nothing deleted
    with psycopg.connect(database_url) as conn:
        users = dict(conn.execute("SELECT session_id, min(user_id) FROM messages GROUP BY 1").fetchall())
    assert users == {"s-events": "noor", "conv-1": "noor", "s-ann": "ann"}

    # run again: nothing more to resolve, the table as it was
    before = table_fingerprints(database_url, ["quarantine", "messages"])
    [again] = materialize_partitions([transcripts], [DAY], database_url, folder, source_user="noor")
    assert materialization_metadata(again, "transcripts")["refusals_resolved"] == 0
    assert table_fingerprints(database_url, ["quarantine", "messages"]) == before

    # the text listing says what is open and points at the resolved ones
    assert cmd_quarantine(build_parser().parse_args(["quarantine"]), load()) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == "1 refusal(s) open; 7 resolved by a later run (--resolved lists them)"
    assert text[1].startswith("  notes/ann.jsonl:2  unknown_role  unknown role \"robot\"")
    assert cmd_quarantine(build_parser().parse_args(["quarantine", "--resolved", "--reason", "unmapped"]), load()) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0] == "6 unmapped refusal(s) resolved by a later run; 0 still open" and len(text) == 7
    assert all(f"by run {second.run_id}" in line for line in text[1:])


def _message(file: str, line: int, seq: int, content: str) -> Message:
    return Message(session_id="s1", seq=seq, user_id="ann", role="user", content=content,
                   ts=datetime(2026, 10, 14, tzinfo=UTC), content_hash=f"h-{content}", source_file=file,
                   source_line=line)


def _refusal(file: str, line: int, reason: QuarantineReason, raw: str, seq: int | None = None) -> QuarantinedRecord:
    return QuarantinedRecord(file, line, reason, "detail", raw, len(raw), "s1" if seq is not None else None, seq)


def test_refusals_are_resolved_by_their_own_record_and_refused_again_are_the_same_row(database_url):
    with psycopg.connect(database_url) as conn:
        def rows():
            return conn.execute("SELECT id, source_file, source_line, reason, resolved_by_run FROM quarantine "
                                "ORDER BY id").fetchall()

        bad_time = _refusal("a.jsonl", 1, QuarantineReason.INVALID_TIMESTAMP, '{"seq": 1, "ts": "soon"}', seq=1)
        conflict = _refusal("b.jsonl", 1, QuarantineReason.CONFLICTING_DUPLICATE, "s1 2 other", seq=2)
        bad_json = _refusal("c.jsonl", 3, QuarantineReason.MALFORMED_JSON, "{oops")
        for run in ("r1", "r2"):  # refused again: no second row
            transcripts_db.insert_quarantine(conn, [bad_time, conflict, bad_json], DAY, run)
        assert [r[1:] for r in rows()] == [("a.jsonl", 1, "invalid_timestamp", None),
                                           ("b.jsonl", 1, "conflicting_duplicate", None),
                                           ("c.jsonl", 3, "malformed_json", None)]
        ids = [r[0] for r in rows()]
        # a.jsonl line 1 fixed and stored; (s1, 2) stored from a.jsonl line 2 (what b.jsonl
        # conflicts with); c.jsonl line 4 stored: none of them is c.jsonl line 3
        stored = [_message("a.jsonl", 1, 1, "fixed"), _message("a.jsonl", 2, 2, "first"),
                  _message("c.jsonl", 4, 3, "next")]
        transcripts_db.insert_messages(conn, stored, "r3")
        unheld = _message("c.jsonl", 3, 4, "never stored")  # read, not in the archive (forgotten, say)
        assert transcripts_db.resolve_held_refusals(conn, [*stored, unheld], "r3") == 1
        assert [r[4] for r in rows()] == ["r3", None, None]
        assert transcripts_db.resolve_held_refusals(conn, stored, "r4") == 0  # resolved once
        # the conflicting record's own line now holds it (its file fixed to another seq): resolved
        fixed = _message("b.jsonl", 1, 5, "moved")
        transcripts_db.insert_messages(conn, [fixed], "r5")
        assert transcripts_db.resolve_held_refusals(conn, [fixed], "r5") == 0  # it names (s1, 2), not (s1, 5)
        # the same record refused again (the fix undone): the same row, open again
        transcripts_db.insert_quarantine(conn, [bad_time], DAY, "r6")
        assert [r[0] for r in rows()] == ids and [r[4] for r in rows()] == [None, None, None]
        totals = transcripts_db.quarantine_totals(conn)
        assert totals == (3, 0)

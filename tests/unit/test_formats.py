"""Transcript formats decoded into canonical records (no database, no DuckDB validation)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memory_pipelines import formats
from memory_pipelines.formats import (
    TRANSCRIPT_FORMATS, FormatOptions, call_arguments, RawRecord, decode_records, detect_format, is_transcript_name,
    parse_field_mapping,
)
from memory_pipelines.records import QuarantineReason

SAMPLES = Path(formats.__file__).parent.parent / "sample_data"
OPENAI = SAMPLES / "formats" / "openai" / "chat_log.jsonl"
EVENTS = SAMPLES / "formats" / "agent_events" / "session.jsonl"
EXPORT = SAMPLES / "formats" / "chat_export" / "conversations.json"
SCHEMA = jsonschema.Draft202012Validator(
    json.loads((SAMPLES.parent / "schemas" / "transcript_message.schema.json").read_text()))
SESSION = "4b7e2c90-1d3a-4f6e-8a25-7c0e9b1f3d42"
LISBON = "c93e5b17-8f40-4d2a-a6e1-54b0d9f27c3e"
SOURDOUGH = "6a1f0c2e-3b7d-4e58-9c11-2f0d8e4b7a90"


def _decode(path: Path, fmt: str | None = None, **options) -> list[RawRecord]:
    return list(decode_records(path.name, path.read_bytes(), fmt, FormatOptions(**options)))


def _lines(*objects) -> bytes:
    return "".join(json.dumps(o) + "\n" for o in objects).encode()


def _records(records: list[RawRecord]) -> list[dict]:
    """The canonical records of the accepted ones, each valid by the shipped JSON Schema."""
    accepted = [json.loads(r.raw) for r in records if r.pre_reason is None]
    for record in accepted:
        SCHEMA.validate(record)
    return accepted


def _refused(records: list[RawRecord]) -> list[tuple[int, str, str]]:
    return [(r.line, r.pre_reason, r.pre_detail) for r in records if r.pre_reason is not None]


# -- names and detection


def test_transcript_names_by_suffix_case_insensitive():
    assert all(is_transcript_name(n) for n in ("a.jsonl", "b/C.NDJSON", "x.Parquet", "conversations.json"))
    assert not any(is_transcript_name(n) for n in ("notes.csv", "jsonl", "a.json.bak", "README"))


@pytest.mark.parametrize("path, expected", [
    (OPENAI, "openai"), (EVENTS, "agent-events"), (EXPORT, "chat-export"),
    (SAMPLES / "transcripts" / "alice" / "2026-10-week1.jsonl", "canonical"),
    (SAMPLES / "transcripts" / "bob" / "sessions" / "s-bob-0006" / "history.json", "canonical"),
    (SAMPLES / "transcripts" / "emi" / "s-emi-0004.parquet", "canonical"),
    (SAMPLES / "bad_input" / "broken_history" / "history.json", "canonical"),
    (SAMPLES / "bad_input" / "malformed_json.jsonl", "canonical"),
])
def test_detects_each_samples_format(path, expected):
    assert detect_format(path.name, path.read_bytes()) == expected


def test_detection_looks_past_lines_that_do_not_tell():
    event = {"type": "user", "sessionId": "s", "uuid": "u1", "message": {"role": "user", "content": "hi"}}
    summary = {"type": "summary", "summary": "a session", "leafUuid": "u9"}
    snapshot = {"type": "file-history-snapshot", "messageId": "m1", "snapshot": {}}
    assert detect_format("s.jsonl", b"\n{broken\n[1]\n" + _lines(summary, snapshot, event)) == "agent-events"
    assert detect_format("s.ndjson", _lines({"messages": []})) == "openai"
    assert detect_format("s.jsonl", _lines({"session_id": "s", "role": "user"}, event)) == "canonical"
    assert detect_format("s.jsonl", _lines(summary)) == "canonical"  # nothing tells
    assert detect_format("s.jsonl", b"") == detect_format("x.json", b"{") == "canonical"
    # an export is detected from its first conversation, even when the rest is cut off
    assert detect_format("c.json", b'[1, {"title": "t", "mapping": {}}, {"cut') == "chat-export"
    assert detect_format("c.json", b'[{"mapping": {}}]') == "canonical"  # neither current_node nor title
    assert detect_format("c.parquet", b"[{}]") == "canonical"


def test_detection_says_what_it_saw_and_the_cli_prints_it(capsys):
    from memory_pipelines.cli import main

    event = {"type": "user", "sessionId": "s", "uuid": "u1", "message": {"role": "user", "content": "hi"}}
    summary = {"type": "summary", "summary": "a session", "leafUuid": "u9"}
    seen = formats.detect("s.jsonl", _lines(summary, event))
    assert seen.format == "agent-events" and seen.saw.startswith("line 2: ") and "Claude Code" in seen.saw
    foreign = formats.detect("s.jsonl", _lines({"id": 1, "text": "hi", "when": "today"}))
    assert foreign.format == "canonical" and "id, text, when" in foreign.saw

    assert main(["formats", str(SAMPLES / "formats"), "--json"]) == 0
    found = {row["file"]: row for row in json.loads(capsys.readouterr().out)}
    assert {row["format"] for row in found.values()} == set(TRANSCRIPT_FORMATS) - {"canonical"}
    assert "Claude.ai" in found["claude_ai/conversations.json"]["saw"]
    assert "ChatGPT" in found["chat_export/conversations.json"]["saw"]
    assert found["claude_code_export/session-export.json"]["format"] == "agent-events"
    assert main(["formats", str(OPENAI)]) == 0
    assert capsys.readouterr().out.startswith("chat_log.jsonl: openai — line 1: ")


# -- canonical: what the readers wrote before formats existed, byte for byte


def test_canonical_json_lines_keep_each_line_as_written():
    data = (b'\xef\xbb\xbf{"seq": 1}\r\n\n   \n{"role": "\xc3\xa9"}\n'
            b'{"ts": "x\x00y"}\n{"content": "\xff"}')
    assert list(decode_records("t.jsonl", data)) == [
        RawRecord(1, '{"seq": 1}', 10),
        RawRecord(4, '{"role": "é"}', 14),
        RawRecord(5, '{"ts": "xy"}', 13, QuarantineReason.NUL_BYTE, "NUL byte at offset 9"),
        RawRecord(6, '{"content": "\ufffd"}', 16, QuarantineReason.INVALID_UTF8, "invalid UTF-8 at byte 13"),
    ]


def test_a_record_with_none_of_the_canonical_fields_says_what_it_saw_and_what_to_set():
    """A file no format recognised, read as canonical: its records name their keys, the
    fields a canonical record needs, and the setting that reads another format."""
    data = b'{"timestamp": "2026-10-02T10:00:00Z", "type": "session_meta", "payload": {}}\n{"seq": 2}\n'
    first, second = decode_records("log.jsonl", data, "canonical")
    assert first.pre_reason == QuarantineReason.MISSING_FIELD and first.pre_detail.startswith(
        "canonical: an object with payload, timestamp, type has none of the canonical fields (session_id, user_id, "
        "seq, role, content, ts) and no other format recognised the file; if it is one, set MEMORY_TRANSCRIPT_FORMAT")
    assert second.pre_reason is None  # a canonical record with faults of its own: validation names them
    [element] = decode_records("h.json", b'[{"speaker": "me", "text": "hi"}]')
    assert element.pre_detail.startswith("canonical: an object with speaker, text has none")


def test_canonical_json_arrays():
    data = '[{"session_id": "s", "content": "é"}, 3]'.encode()
    assert list(decode_records("history.json", data)) == [
        RawRecord(1, '{"session_id": "s", "content": "é"}', 36), RawRecord(2, "3", 1)]
    assert list(decode_records("history.json", b'[{"a": ')) == [
        RawRecord(0, '[{"a": ', 7, QuarantineReason.MALFORMED_JSON, "not a valid JSON array: Expecting value at line 1")]
    assert list(decode_records("config.json", b'{"a": 1}')) == [
        RawRecord(0, '{"a": 1}', 8, QuarantineReason.NOT_AN_OBJECT, "a .json transcript must hold a JSON array of messages")]


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def test_canonical_parquet_rows_as_duckdb_writes_them():
    data = _parquet(pa.table({"session_id": ["s1", "s1"], "seq": pa.array([1, 2], pa.int64()),
                              "content": ["hi", None], "tool_args": [None, '{"command": "ls"}']}))
    assert list(decode_records("a.parquet", data)) == [
        RawRecord(1, '{"session_id":"s1","seq":1,"content":"hi","tool_args":null}', 59),
        RawRecord(2, '{"session_id":"s1","seq":2,"content":null,"tool_args":"{\\"command\\": \\"ls\\"}"}', 78),
    ]
    [broken] = decode_records("corrupt.parquet", b"PAR1 not really")
    assert (broken.line, broken.raw, broken.raw_bytes, broken.pre_reason) == (0, "", 15, QuarantineReason.UNREADABLE_FILE)
    assert broken.pre_detail.startswith("cannot read Parquet file: ") and "\n" not in broken.pre_detail


def test_canonical_samples_read_as_before():
    alice = SAMPLES / "transcripts" / "alice" / "2026-10-week1.jsonl"
    lines = alice.read_text().split("\n")
    assert [(r.line, r.raw, r.pre_reason) for r in _decode(alice)] == \
        [(n, line, None) for n, line in enumerate(lines, start=1) if line.strip()]
    emi = _decode(SAMPLES / "transcripts" / "emi" / "s-emi-0004.parquet")
    assert len(emi) == 12 and emi[0] == RawRecord(1, (
        '{"session_id":"s-emi-0004","user_id":"emi","agent_id":"navi","seq":1,"role":"user","content":"こんばんは",'
        '"ts":"2026-10-09T12:15:37Z","tool_name":null,"tool_args":null,"tool_call_id":null,"metadata":null}'), 209)
    history = SAMPLES / "transcripts" / "bob" / "sessions" / "s-bob-0006" / "history.json"
    items = json.loads(history.read_text())
    assert [r.raw for r in _decode(history)] == [json.dumps(item, ensure_ascii=False) for item in items]
    bad = SAMPLES / "bad_input"
    assert _refused(_decode(bad / "invalid_utf8.jsonl")) == [(2, "invalid_utf8", "invalid UTF-8 at byte 95")]
    assert _refused(_decode(bad / "nul_byte.jsonl")) == [(2, "nul_byte", "NUL byte at offset 94")]
    assert _refused(_decode(bad / "broken_history" / "history.json")) == \
        [(0, "malformed_json", "not a valid JSON array: Expecting value at line 1")]
    assert [r.pre_reason for r in _decode(bad / "corrupt.parquet")] == ["unreadable_file"]


# -- openai


def test_openai_sample_decodes_to_the_growing_chats_records():
    records = _decode(OPENAI)
    assert [r.line for r in records] == list(range(1, 37)) and _refused(records) == []
    rows = _records(records)
    assert [(r["session_id"], r["seq"]) for r in rows[:4]] == [("conv-hollis-ride", s) for s in (1, 2, 3)] + \
        [("sess-marcus-0412", 1)]
    priya = {r["seq"]: r for r in rows if r["session_id"] == "conv-hollis-ride"}
    assert len(priya) == 11 and {r["user_id"] for r in priya.values()} == {"priya"}
    assert [priya[s]["role"] for s in range(1, 12)] == \
        ["system", "user", "assistant", "user", "assistant", "tool", "assistant", "user", "assistant", "user", "assistant"]
    # `created` is epoch seconds of the line that first carried the message
    assert (priya[1]["ts"], priya[4]["ts"], priya[11]["ts"]) == \
        ("2026-10-04T09:12:40Z", "2026-10-04T09:14:05Z", "2026-10-04T09:17:52Z")
    call, result = priya[5], priya[6]
    assert (call["content"], call["tool_name"], call["tool_call_id"], call["tool_args"]) == \
        ('[called get_forecast(location="Lake Hollis", date="2026-10-10", hourly=true)]', "get_forecast", "call_wx_01",
         {"location": "Lake Hollis", "date": "2026-10-10", "hourly": True})
    assert call["metadata"]["tool_calls"][0]["function"]["name"] == "get_forecast"
    # a tool result without `name` takes the name of the call it answers
    assert (result["role"], result["tool_call_id"], result["tool_name"]) == ("tool", "call_wx_01", "get_forecast")
    assert priya[4]["metadata"] == {"line": {"model": "trailmate-chat-3"}}
    marcus = {r["seq"]: r for r in rows if r["session_id"] == "sess-marcus-0412"}
    assert len(marcus) == 10 and {r["user_id"] for r in marcus.values()} == {"marcus"}
    # a message's own time wins over the line's created_at
    assert (marcus[3]["ts"], marcus[3]["tool_name"], marcus[4]["tool_name"]) == \
        ("2026-10-06T14:02:14Z", "read_file", "read_file")
    assert marcus[2]["content"].startswith("The monthly report script crashes") and \
        marcus[2]["metadata"]["non_text_parts"] == [
            {"type": "image_url", "image_url": {"url": "https://files.example.com/u/marcus/screenshot-0412.png"}}]
    assert marcus[1]["metadata"]["line"] == {"id": "req-140231",
                                             "metadata": {"session_id": "sess-marcus-0412", "user_id": "marcus"}}


def test_openai_resent_messages_are_the_very_records_of_their_first_line():
    records = _decode(OPENAI)
    by_key: dict[tuple, set[str]] = {}
    for r in records:
        record = json.loads(r.raw)
        by_key.setdefault((record["session_id"], record["seq"]), set()).add(r.raw)
    assert len(by_key) == 21 and all(len(raws) == 1 for raws in by_key.values())
    assert sum(1 for r in records if '"seq": 1,' in r.raw and "conv-hollis-ride" in r.raw) == 3
    # a message changed on a later line is mapped again, from that line; the first version
    # coming back after it is the first record again
    first = {"conversation_id": "c1", "user": "u", "created": 1791100000, "messages": [{"role": "user", "content": "a"}]}
    edited = {**first, "created": 1791100060, "messages": [{"role": "user", "content": "b"}]}
    back = {**first, "created": 1791100120}
    a, b, c = (json.loads(r.raw) for r in decode_records("l.jsonl", _lines(first, edited, back), "openai"))
    assert (a["content"], a["ts"], b["content"], b["ts"]) == ("a", "2026-10-04T07:46:40Z", "b", "2026-10-04T07:47:40Z")
    assert c == a


def test_openai_a_chat_continued_in_another_file_resends_the_same_records():
    """Messages with their own times, lines agreeing on their other fields: the second file's
    re-sent messages are the very records of the first file (duplicates, not conflicts)."""
    def line(*contents):
        return {"conversation_id": "c9", "user": "u", "model": "m", "messages": [
            {"role": "user" if i % 2 == 0 else "assistant", "content": c, "timestamp": f"2026-10-04T08:0{i}:00Z"}
            for i, c in enumerate(contents)]}

    day1 = [json.loads(r.raw) for r in decode_records("day1.jsonl", _lines(line("hi"), line("hi", "hello")), "openai")]
    day2 = [json.loads(r.raw) for r in decode_records("day2.jsonl", _lines(line("hi", "hello", "bye")), "openai")]
    assert day2[:2] == day1[1:] and day2[2]["seq"] == 3


def test_openai_a_request_id_is_not_a_session():
    request = {"id": "req-1", "user": "u", "created": 1791100000, "messages": [{"role": "user", "content": "a"}]}
    [refused] = decode_records("l.jsonl", _lines(request), "openai")
    assert refused.pre_reason == "unmapped" and "no session id" in refused.pre_detail
    [mapped] = decode_records("l.jsonl", _lines(request), "openai", FormatOptions({"session_id": "id"}))
    assert json.loads(mapped.raw)["session_id"] == "req-1"


def test_openai_tool_calls_roles_and_field_mapping():
    line = {"conversation": {"key": "c-7"}, "owner": "ines", "when": "2026-10-20T08:00:00+02:00", "bot": "helper-2",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "assistant",
                 "content": [{"type": "text", "text": "Checking."}, {"type": "text", "text": "Two calls."}],
                 "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "lookup", "arguments": "{not json"}},
                                {"id": "t2", "type": "function", "function": {"name": "search", "arguments": "{\"q\": 1}"}}],
                 "refusal": None},
                {"role": "tool", "tool_call_id": "t2", "content": "found"},
                {"role": "tool", "tool_call_id": "t1", "name": "lookup_v2", "content": None}]}
    options = FormatOptions(parse_field_mapping("session_id=conversation.key,user_id=owner,ts=when,agent_id=bot"))
    system, call, second, first = _records(list(decode_records("x.jsonl", _lines(line), "openai", options)))
    assert (system["role"], system["metadata"]["source_role"]) == ("system", "developer")
    assert {r["session_id"] for r in (system, call)} == {"c-7"} and call["agent_id"] == "helper-2"
    assert (call["user_id"], call["ts"], call["content"]) == ("ines", "2026-10-20T08:00:00+02:00", "Checking.\nTwo calls.")
    # the first call names the tool; broken arguments are kept whole
    assert (call["tool_name"], call["tool_call_id"], call["tool_args"]) == ("lookup", "t1", {"_raw": "{not json"})
    assert [c["id"] for c in call["metadata"]["tool_calls"]] == ["t1", "t2"]
    assert call["metadata"]["message"] == {"refusal": None}
    assert call["metadata"]["line"] == {"conversation": {"key": "c-7"}}  # the nested path stays
    assert (second["tool_name"], first["tool_name"], first["content"]) == ("search", "lookup_v2", "")


def test_openai_refusals_name_what_to_fix():
    good = {"session_id": "s", "user_id": "u", "created": 1791100000, "messages": [{"role": "user", "content": "hi"}]}
    data = b"".join([
        b"{broken\n",
        b"[1, 2]\n",
        _lines({"session_id": "s", "user_id": "u", "prompt": "hi"}),
        _lines({**good, "messages": []}),
        _lines({"user_id": "u", "created": 1, "messages": [{"role": "user", "content": "x"}]}),
        _lines({"session_id": "s", "created": 1, "messages": [{"role": "user", "content": "x"}]}),
        _lines({"session_id": "s", "user_id": "u", "messages": [{"role": "user", "content": "x", "timestamp": 1791100000},
                                                                {"role": "user", "content": "y"}, "text",
                                                                {"role": "user", "content": 5, "timestamp": 1}]}),
        _lines(good),
    ])
    records = list(decode_records("x.jsonl", data, "openai"))
    refused = _refused(records)
    assert [(line, reason) for line, reason, _ in refused] == [
        (1, "malformed_json"), (2, "not_an_object"), (3, "unmapped"), (4, "unmapped"), (5, "unmapped"),
        (6, "unmapped"), (8, "unmapped"), (9, "unmapped"), (10, "unmapped")]
    details = [detail for _, _, detail in refused]
    assert details[0].startswith("line 1: not valid JSON: ")
    assert details[1] == "line 2: a line must be a JSON object, got an array"
    assert details[2].startswith("line 3: no messages array: format openai reads one conversation a line")
    assert details[3] == "line 4: the messages array is empty"
    assert details[4] == ("line 5: no session id: none of session_id, conversation_id, metadata.session_id, "
                          "metadata.conversation_id found; map it with MEMORY_FORMAT_FIELDS=session_id=<path>")
    assert details[5] == ("line 6: no user id: none of user_id, user, metadata.user_id, metadata.user found; "
                          "set MEMORY_SOURCE_USER or map user_id in MEMORY_FORMAT_FIELDS")
    assert details[6].startswith("line 7: message 1: no time: none of messages[].timestamp, messages[].created_at, "
                                 "created_at, created") and details[6].endswith("MEMORY_FORMAT_FIELDS=ts=<path>")
    assert details[7] == "line 7: message 2 is not an object"
    assert details[8] == "line 7: message 3: content is a number, not a string, null or a list of parts"
    assert [r.line for r in records] == list(range(1, 12))
    assert [(r["seq"], r["ts"]) for r in _records(records)] == [(1, "2026-10-04T07:46:40Z"), (1, "2026-10-04T07:46:40Z")]
    # the source's user, when the lines name none
    [mapped] = decode_records("x.jsonl", _lines({**good, "user_id": None}), "openai", FormatOptions(user_id="zoe"))
    assert json.loads(mapped.raw)["user_id"] == "zoe"


# -- agent-events


def test_agent_events_sample_decodes_to_one_coding_session():
    records = _decode(EVENTS, user_id="noor")
    assert [r.line for r in records] == list(range(1, 18))
    # the summary event is no turn: skipped by its kind, not refused
    assert _refused(records) == [(1, "skipped_event", "summary")]
    rows = _records(records)
    assert [r["seq"] for r in rows] == list(range(1, 17))
    assert {(r["session_id"], r["user_id"]) for r in rows} == {(SESSION, "noor")}
    assert [r["role"] for r in rows] == \
        ["user"] + ["assistant", "tool"] * 5 + ["assistant", "user", "assistant", "tool", "assistant"]
    first = rows[0]
    assert (first["content"], first["ts"]) == (
        "tests/test_worker.py::test_retry_backoff fails about one run in five on CI. Can you find out why?",
        "2026-10-14T09:31:02.114Z")
    assert first["metadata"]["event"] == {
        "cwd": "/home/noor/src/ingest-worker", "gitBranch": "fix/retry-jitter", "version": "1.8.3",
        "userType": "external"}
    assert first["metadata"]["uuid"] == "e010c5a1-7f2b-4c3d-9e8f-000000000001" and "speaker" not in first["metadata"]
    read = rows[1]
    assert (read["content"], read["tool_name"], read["tool_call_id"], read["tool_args"]) == (
        "I'll start by reading the test and the backoff helper.", "Read", "toolu_01",
        {"file_path": "/home/noor/src/ingest-worker/tests/test_worker.py"})
    assert read["metadata"]["thinking"][0].startswith("A flaky timing test") and len(read["metadata"]["tool_uses"]) == 1
    assert "flaky timing" not in read["content"]  # thinking is kept, never content
    assert read["metadata"]["message"]["model"] == "coder-large-2026-08"
    result = rows[2]
    assert (result["role"], result["tool_call_id"], result["tool_name"]) == ("tool", "toolu_01", "Read")
    assert result["content"].startswith("def test_retry_backoff():") and "is_error" not in result["metadata"]
    failed = rows[4]
    assert (failed["tool_name"], failed["metadata"]["is_error"]) == ("Bash", True)
    assert failed["content"].endswith("unrecognized arguments: --count 20")
    assert rows[6]["content"].startswith("4 passed, then:")  # a result given as text blocks
    # a call with no text says what it called: never an empty turn
    assert (rows[9]["content"], rows[9]["tool_name"]) == (
        '[called Bash(command="for i in $(seq 20); do pytest tests/test_worker.py -k retry_backoff -q || break; '
        'done | tail -1", description="Loop the backoff test again")]', "Bash")


def test_agent_events_a_tool_result_beside_text_and_an_image_keeps_them_all():
    """A result block with a text block beside it (an interruption notice) is still the tool's
    answer; parts without text (an inline image) are kept in metadata, their data cut."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 5000}}
    event = {"type": "user", "sessionId": "s1", "uuid": "u2", "timestamp": "2026-10-14T09:00:00Z", "message": {
        "role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_9", "content": "1 failed", "is_error": True},
            {"type": "tool_result", "tool_use_id": "toolu_10", "content": [image]},
            {"type": "text", "text": "[Request interrupted by user]"}, {"type": "document", "title": "d"}]}}
    call = {**event, "type": "assistant", "uuid": "u1", "message": {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_9", "name": "Bash", "input": {"command": "pytest"}}]}}
    _, result = _records(list(decode_records("e.jsonl", _lines(call, event), "agent-events", FormatOptions(user_id="n"))))
    assert (result["role"], result["content"], result["tool_call_id"], result["tool_name"]) == (
        "tool", "1 failed\n\n[Request interrupted by user]", "toolu_9", "Bash")
    meta = result["metadata"]
    assert meta["is_error"] is True and meta["tool_use_ids"] == ["toolu_9", "toolu_10"]
    [kept] = meta["non_text_parts"]
    assert kept["source"]["data"].startswith("A" * 500) and kept["source"]["data"].endswith("[5,000 characters, cut]")
    assert meta["other_blocks"] == [{"type": "document", "title": "d"}]


def test_agent_events_refusals():
    event = {"type": "user", "sessionId": "s1", "uuid": "u1", "timestamp": "2026-10-14T09:00:00Z",
             "message": {"role": "user", "content": "hi"}}
    data = _lines(event, {**event, "sessionId": None}, {"sessionId": "s1"}, {**event, "timestamp": None},
                  {**event, "message": {"role": "user", "content": 7}}, event)
    records = list(decode_records("e.jsonl", data, "agent-events", FormatOptions(user_id="noor")))
    assert _refused(records) == [
        (2, "unmapped", "agent-events: no session id: none of sessionId, session_id found; map it with "
                        "MEMORY_FORMAT_FIELDS=session_id=<path>"),
        (3, "unmapped", "agent-events: event without a type holds no message"),
        (4, "unmapped", "agent-events: no time: none of timestamp found; map it with MEMORY_FORMAT_FIELDS=ts=<path>"),
        (5, "unmapped", "agent-events: message content is a number, not a string or a list of blocks"),
    ]
    # refused events keep their place: fixing one later leaves the others' seqs as they are
    assert [r["seq"] for r in _records(records)] == [1, 4]
    [no_user] = _refused(_decode(EVENTS))[1:2]
    assert no_user == (2, "unmapped", "agent-events: no user id: none of userId, user_id found; set MEMORY_SOURCE_USER or map "
                                      "user_id in MEMORY_FORMAT_FIELDS")
    mapped = FormatOptions({"session_id": "message.conv", "user_id": "who"})
    [record] = decode_records("e.jsonl", _lines({**event, "who": "ada", "message": {"role": "user", "content": "x",
                                                                                     "conv": "c9"}}),
                              "agent-events", mapped)
    assert (json.loads(record.raw)["session_id"], json.loads(record.raw)["user_id"]) == ("c9", "ada")


# -- chat-export


PICTURE = {"content_type": "image_asset_pointer", "asset_pointer": "file-service://file-7QpX", "size_bytes": 184233,
           "width": 1024, "height": 768}


def test_chat_export_sample_current_path_and_its_fork():
    records = _decode(EXPORT, user_id="lena")
    assert [r.line for r in records] == list(range(1, 20)) and _refused(records) == []
    rows = _records(records)
    sourdough = [r for r in rows if r["session_id"] == SOURDOUGH]
    # the hidden system message and the root without a message are not turns
    assert [r["seq"] for r in sourdough] == list(range(1, 10)) and sourdough[0]["role"] == "user"
    assert sourdough[0]["ts"] == "2026-10-08T18:40:02.501000Z"
    assert sourdough[0]["metadata"] == {"title": "Sourdough starter rescue", "node_id": "a1-5d2c-4a7e-b3f1-0e9c8d7b6a51",
                                        "content_type": "multimodal_text", "non_text_parts": [PICTURE]}
    assert sourdough[0]["content"].startswith("My rye starter has a grey liquid")
    assert sourdough[1]["metadata"]["model_slug"] == "chat-4o"
    lisbon = [r for r in rows if r["session_id"] == LISBON]
    assert [r["seq"] for r in lisbon] == [1, 2, 3, 4, 5, 6]
    assert lisbon[2]["content"].startswith("We'd rather stay in the city")  # the edited question is current
    assert all("parent_session_id" not in r for r in sourdough + lisbon)
    fork = [r for r in rows if r["session_id"] not in (SOURDOUGH, LISBON)]
    assert {r["session_id"] for r in fork} == {f"{LISBON}~ba3-91e4-4c0b-8d6a-3f2e1c0b9a86"}
    assert [(r["seq"], r["parent_session_id"], r["fork_seq"]) for r in fork] == [(s, LISBON, 2) for s in (3, 4, 5, 6)]
    assert fork[0]["content"] == "Can we fit in a day trip to Sintra?"
    assert {r["user_id"] for r in rows} == {"lena"}


def _node(node_id, parent, role=None, text="", t=None, **message):
    entry = {"id": node_id, "parent": parent, "children": [], "message": None}
    if role is not None:
        entry["message"] = {"id": node_id, "author": {"role": role, **message.pop("author", {})}, "create_time": t,
                            "content": {"content_type": "text", "parts": [text]}, **message}
    return entry


def _conversation(current, *nodes, **fields):
    return {"id": "c", "title": "t", "create_time": 1791100000.5, "current_node": current,
            "mapping": {n["id"]: n for n in nodes}, **fields}


def test_chat_export_branches_of_branches_are_forks_of_the_main_session():
    # root - u1 - a1 - u2 - a2 (current)
    #            \- u2b - a2b - u3b          (diverges after a1)
    #                       \- u3c - a3c     (off that branch: still a fork of the main session)
    #   \- u1z                               (an edited first question: shares no message)
    tree = _conversation(
        "a2", _node("root", None), _node("u1", "root", "user", "q1", 1791100010), _node("a1", "u1", "assistant", "r1"),
        _node("u2", "a1", "user", "q2"), _node("a2", "u2", "assistant", "r2"),
        _node("u2b", "a1", "user", "q2b"), _node("a2b", "u2b", "assistant", "r2b"), _node("u3b", "a2b", "user", "q3b"),
        _node("u3c", "a2b", "user", "q3c"), _node("a3c", "u3c", "tool", "out", author={"name": "python"}),
        _node("u1z", "root", "user", "q1z"))
    rows = _records(list(decode_records("c.json", json.dumps([tree]).encode(), None, FormatOptions(user_id="u"))))
    sessions: dict[str, list] = {}
    for r in rows:
        sessions.setdefault(r["session_id"], []).append(
            (r["seq"], r["content"], r.get("parent_session_id"), r.get("fork_seq")))
    assert sessions == {
        "c": [(1, "q1", None, None), (2, "r1", None, None), (3, "q2", None, None), (4, "r2", None, None)],
        "c~u3b": [(3, "q2b", "c", 2), (4, "r2b", "c", 2), (5, "q3b", "c", 2)],
        "c~a3c": [(3, "q2b", "c", 2), (4, "r2b", "c", 2), (5, "q3c", "c", 2), (6, "out", "c", 2)],
        "c~u1z": [(1, "q1z", "c", 0)],
    }
    # a message's own time, else the conversation's; a tool's name is its author's
    assert rows[0]["ts"] == "2026-10-04T07:46:50Z" and rows[1]["ts"] == "2026-10-04T07:46:40.500000Z"
    assert [r["tool_name"] for r in rows if r["role"] == "tool"] == ["python"]


def test_chat_export_refusals_name_the_conversation():
    ok = _conversation("u1", _node("u1", None, "user", "hi"))
    data = json.dumps([
        ok, 7, {"id": "c2", "title": "t"}, {**ok, "id": None}, {**ok, "id": "c4", "current_node": "gone"},
        {**ok, "id": "c5", "create_time": None},
        {**ok, "id": "c6", "mapping": {"x": {"parent": "y"}, "y": {"parent": "x"}}, "current_node": "x"},
    ]).encode()
    records = list(decode_records("conversations.json", data, "chat-export", FormatOptions(user_id="u")))
    assert [(line, detail) for line, _, detail in _refused(records)] == [
        (2, "element 2 is no conversation of a chat export: it has no mapping of message nodes"),
        (3, "element 3 is no conversation of a chat export: it has no mapping of message nodes"),
        (4, "conversation 4 has no id or conversation_id"),
        (5, "conversation 'c4': its current_node \"gone\" is not in its mapping"),
        (6, "conversation 'c5', node 'u1': no create_time on the message or the conversation"),
        (7, "conversation 'c6': the parents of node 'x' run in a loop"),
    ]
    assert {r.pre_reason for r in records if r.pre_reason} == {QuarantineReason.UNMAPPED}
    assert [r["session_id"] for r in _records(records)] == ["c"]
    [no_user] = decode_records("conversations.json", json.dumps([ok]).encode())
    assert (no_user.line, no_user.pre_reason, no_user.pre_detail) == \
        (1, "unmapped", "conversation 'c' names no user: set MEMORY_SOURCE_USER")
    [owned] = decode_records("conversations.json", json.dumps([{**ok, "user_id": "max"}]).encode())
    assert json.loads(owned.raw)["user_id"] == "max"


# -- forced formats


def test_a_forced_format_that_does_not_fit_refuses_records_and_never_raises():
    canonical = SAMPLES / "transcripts" / "alice" / "2026-10-week1.jsonl"
    as_openai = _decode(canonical, "openai")
    assert as_openai and {r.pre_reason for r in as_openai} == {"unmapped"}
    assert as_openai[0].pre_detail.startswith("line 1: no messages array: format openai reads one conversation a line")
    assert {r.pre_detail for r in _decode(OPENAI, "agent-events")} == {
        "agent-events: event without a type holds no message"}
    history = SAMPLES / "transcripts" / "bob" / "sessions" / "s-bob-0006" / "history.json"
    assert {(r.pre_reason, r.pre_detail.split(" is ")[1]) for r in _decode(history, "chat-export")} == \
        {("unmapped", "no conversation of a chat export: it has no mapping of message nodes")}
    [whole] = _decode(OPENAI, "chat-export")
    assert (whole.line, whole.pre_reason) == (0, "malformed_json") and whole.pre_detail.startswith("not a valid JSON array")
    [parquet] = _decode(SAMPLES / "transcripts" / "emi" / "s-emi-0004.parquet", "agent-events")
    assert (parquet.line, parquet.pre_reason) == (0, "unmapped") and "holds canonical records" in parquet.pre_detail
    [obj] = decode_records("c.json", b'{"mapping": {}}', "chat-export")
    assert (obj.pre_reason, obj.pre_detail) == \
        ("unmapped", "a chat export must hold a JSON array of conversations, got an object")
    # canonical takes the lines as they are: validation then refuses their fields
    assert [r.pre_reason for r in _decode(OPENAI, "canonical")] == [None] * 5
    with pytest.raises(ValueError, match="unknown transcript format 'csv'"):
        decode_records("a.jsonl", b"", "csv")
    assert set(TRANSCRIPT_FORMATS) == {"canonical", "openai", "agent-events", "chat-export", "codex", "aider"}


# -- field mappings


def test_parse_field_mapping():
    assert parse_field_mapping("session_id=conversation_id, user_id = metadata.user ,") == \
        {"session_id": "conversation_id", "user_id": "metadata.user"}
    assert parse_field_mapping("") == {}


@pytest.mark.parametrize("text, message", [
    ("session_id", "field mapping 'session_id' is not canonical=path (canonical: session_id, user_id, seq"),
    ("user_id=", "field mapping 'user_id=' is not canonical=path"),
    ("owner=user", "field mapping 'owner=user': 'owner' is no canonical field (canonical: session_id, user_id, seq, "
                   "role, content, ts, agent_id, tool_name, tool_args, tool_call_id, metadata, parent_session_id, "
                   "fork_seq, id)"),
    ("ts=meta..created", "field mapping 'ts=meta..created': the path 'meta..created' has an empty step"),
    ("ts=a,ts=b", "field mapping 'ts=b': ts is mapped twice"),
])
def test_parse_field_mapping_names_the_bad_part(text, message):
    with pytest.raises(ValueError) as caught:
        parse_field_mapping(text)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_every_sample_record_has_the_canonical_fields():
    for path, options in ((OPENAI, {}), (EVENTS, {"user_id": "noor"}), (EXPORT, {"user_id": "lena"})):
        rows = _records(_decode(path, **options))
        assert rows and all({"session_id", "user_id", "seq", "role", "content", "ts"} <= set(r) for r in rows)
        assert all(r["role"] in ("user", "assistant", "tool", "system") for r in rows)


def test_results_of_parallel_tool_calls_find_their_own_arguments():
    """An assistant message calling two tools at once: the second call's result is paired
    with the second call's arguments (a fact takes its key prefix from the file read)."""
    from datetime import UTC, datetime

    from memory_pipelines.records import Message
    from memory_pipelines.rules.extraction import extract_facts

    calls = [{"id": f"call_{n}", "type": "function", "function": {"name": "read_file", "arguments": json.dumps(
        {"path": path})}} for n, path in ((1, "notes/todo.md"), (2, "deploy/app.yaml"))]
    line = {"conversation_id": "c", "user": "u", "created": 1791100000, "messages": [
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": "buy milk"},
        {"role": "tool", "tool_call_id": "call_2", "content": "region: eu-west-1\nreplicas: 3\n"}]}
    rows = _records(list(decode_records("l.jsonl", _lines(line), "openai")))
    messages = [Message(r["session_id"], r["seq"], r["user_id"], r["role"], r["content"],
                        datetime(2026, 10, 4, tzinfo=UTC), "h", "l.jsonl", r["seq"], tool_name=r.get("tool_name"),
                        tool_args=r.get("tool_args"), tool_call_id=r.get("tool_call_id"),
                        metadata=r.get("metadata", {}))
                for r in rows]
    assert call_arguments(messages) == {"call_1": {"path": "notes/todo.md"}, "call_2": {"path": "deploy/app.yaml"}}
    assert sorted(f["key"] for f in extract_facts(messages)) == ["app_region", "app_replicas"]

"""chat-export reading a Claude.ai data export (`conversations.json` of `chat_messages`),
decoded into canonical records (no database, no DuckDB validation)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from memory_pipelines import formats
from memory_pipelines.formats import FormatOptions, RawRecord, decode_records, detect_format
from memory_pipelines.formats.chat_export import describe
from memory_pipelines.formats.common import _first_array_object, _text
from memory_pipelines.records import SKIPPED_EVENT, QuarantineReason

SAMPLES = Path(formats.__file__).parent.parent / "sample_data"
CLAUDE = SAMPLES / "formats" / "claude_ai" / "conversations.json"
CHATGPT = SAMPLES / "formats" / "chat_export" / "conversations.json"
SCHEMA = jsonschema.Draft202012Validator(
    json.loads((SAMPLES.parent / "schemas" / "transcript_message.schema.json").read_text()))
ACCOUNT = "7e1d2c3b-0a9f-4e8d-b7c6-5a4f3e2d1c0b"
MIGRATION = "d41a7c2e-6b3f-4e90-8a15-2c7f0e9b3d61"  # a tree: the edited question's first version is a fork
ROLLBACK = f"{MIGRATION}~d41a7c2e-0a06-4c1e-9b7d-3f2a1e0d9c06"
CUTOVER = "5f83b0e4-2d71-4c9a-9e36-b18d4a07c2f5"  # an export of before messages named their parents
SLOW = "a9c06e52-71bd-4f3e-8d24-3e6b5f1a8c07"


def _decode(data: bytes, user: str | None = "marta", fmt: str | None = None) -> list[RawRecord]:
    return list(decode_records("conversations.json", data, fmt, FormatOptions(user_id=user)))


def _accepted(records: list[RawRecord]) -> list[dict]:
    rows = [json.loads(r.raw) for r in records if r.pre_reason is None]
    for row in rows:
        SCHEMA.validate(row)
    return rows


def _refused(records: list[RawRecord]) -> list[tuple[int, str, str]]:
    return [(r.line, r.pre_reason, r.pre_detail) for r in records
            if r.pre_reason is not None and r.pre_reason != SKIPPED_EVENT]


def _sessions(rows: list[dict]) -> dict[str, list[tuple]]:
    out: dict[str, list[tuple]] = {}
    for r in rows:
        out.setdefault(r["session_id"], []).append((r["seq"], r["role"], r.get("parent_session_id"), r.get("fork_seq")))
    return out


@pytest.fixture(scope="module")
def sample() -> list[RawRecord]:
    return _decode(CLAUDE.read_bytes())


def _turn(rows: list[dict], session: str, seq: int) -> dict:
    [row] = [r for r in rows if r["session_id"] == session and r["seq"] == seq]
    return row


# -- detection


def test_the_sample_is_detected_as_a_chat_export_and_described_as_claude_ai():
    data = CLAUDE.read_bytes()
    assert detect_format(CLAUDE.name, data) == "chat-export"
    assert describe(_first_array_object(_text(data))) == \
        "a JSON array of objects with chat_messages — a Claude.ai export"
    # detected from the first conversation alone, even when the rest is cut off
    assert detect_format("c.json", b'[{"uuid": "c", "chat_messages": []}, {"cut') == "chat-export"
    assert detect_format("c.json", b'[{"uuid": "c", "chat_messages": null}]') == "canonical"
    assert describe({"chat_messages": None}) == \
        "a JSON array of objects with neither mapping nor chat_messages — not a chat export"


def test_chatgpt_detection_is_unchanged():
    data = CHATGPT.read_bytes()
    assert detect_format(CHATGPT.name, data) == "chat-export"
    assert describe(_first_array_object(_text(data))) == "a JSON array of objects with mapping — a ChatGPT export"
    assert detect_format("c.json", b'[1, {"title": "t", "mapping": {}}, {"cut') == "chat-export"
    assert detect_format("c.json", b'[{"mapping": {}}]') == "canonical"
    assert describe({"mapping": {}}) == \
        "a JSON array of objects with mapping but neither current_node nor title — not a chat export"
    # the ChatGPT sample is read as it was: no record of it goes the Claude.ai way
    records = _decode(data, "lena")
    assert len(records) == 19 and _refused(records) == []
    assert not any("Claude.ai" in (r.pre_detail or "") or "message_uuid" in r.raw for r in records)


# -- the sample


def test_the_sample_decodes_to_its_sessions_and_fork(sample):
    assert [r.line for r in sample] == list(range(1, 27)) and _refused(sample) == []
    rows = _accepted(sample)
    assert len(rows) == 25
    main = [(s, role, None, None) for s, role in enumerate(["user", "assistant"] * 4, start=1)]
    assert _sessions(rows) == {
        MIGRATION: main,
        # the question as first asked and its answer, after the four turns it shares
        ROLLBACK: [(5, "user", MIGRATION, 4), (6, "assistant", MIGRATION, 4)],
        # the stopped, empty reply takes no seq
        CUTOVER: [(1, "user", None, None), (2, "assistant", None, None), (3, "user", None, None),
                  (4, "assistant", None, None), (5, "user", None, None), (6, "user", None, None),
                  (7, "assistant", None, None), (8, "user", None, None), (9, "assistant", None, None)],
        SLOW: main[:6],
    }
    assert {r["user_id"] for r in rows} == {"marta"}
    assert _turn(rows, MIGRATION, 5)["content"].startswith("Let's do logical replication instead")
    assert _turn(rows, ROLLBACK, 5)["content"] == "What's the rollback plan if pg_upgrade fails halfway?"
    first = _turn(rows, MIGRATION, 1)
    assert first["ts"] == "2026-10-20T08:02:13.417702Z"
    assert first["metadata"]["title"] == "Orders database: PostgreSQL 12 to 16"
    assert first["metadata"]["summary"].startswith("**Conversation Overview**")
    assert first["metadata"]["message_uuid"] == "d41a7c2e-0a01-4c1e-9b7d-3f2a1e0d9c01"
    # the title and summary only on a session's first turn; an empty summary is left out
    assert all("title" not in r["metadata"] for r in rows if r["seq"] > 1 or "parent_session_id" in r)
    assert _turn(rows, CUTOVER, 1)["metadata"] == {"title": "Cutover checklist for the orders migration",
                                                   "message_uuid": "5f83b0e4-0b01-4d2f-8c6e-4a3b2c1d0e01"}


def test_an_empty_message_is_a_skipped_event_never_a_refusal(sample):
    [skipped] = [r for r in sample if r.pre_reason == SKIPPED_EVENT]
    assert (skipped.line, skipped.pre_detail, json.loads(skipped.raw)) == \
        (16, "empty_message", {"ts": "2026-10-21T14:47:56.310455Z"})


def test_attachments_are_what_the_user_sent(sample):
    rows = _accepted(sample)
    first = _turn(rows, MIGRATION, 1)
    question, attached = first["content"].split("\n\n[attachment orders-db-inventory.txt]\n")
    assert question.endswith("What's the safest path?")
    assert attached.startswith("PostgreSQL 12.17 on x86_64") and "postgis             2.5.5" in attached
    assert first["metadata"]["attachments"] == [{"file_name": "orders-db-inventory.txt", "file_size": 441,
                                                 "file_type": "txt"}]
    # a long paste is an attachment without a name
    pasted = _turn(rows, SLOW, 1)
    assert "Plan is pasted below.\n\n[attachment]\nEXPLAIN (ANALYZE, BUFFERS)" in pasted["content"]
    assert pasted["metadata"]["attachments"] == [{"file_name": "", "file_size": 975, "file_type": "txt"}]
    # an uploaded image has no text: its name is kept
    graph = _turn(rows, CUTOVER, 3)
    assert graph["metadata"]["files"] == ["replication-lag.png"] and "replication-lag.png" not in graph["content"]


def test_thinking_is_kept_in_metadata_and_never_in_content(sample):
    rows = _accepted(sample)
    thoughtful = [r for r in rows if "thinking" in r["metadata"]]
    assert [(r["session_id"], r["seq"]) for r in thoughtful] == [(MIGRATION, 2), (CUTOVER, 2), (SLOW, 2)]
    assert thoughtful[0]["metadata"]["thinking"][0].startswith("The inventory lists postgis 2.5.5.")
    thoughts = [t for r in thoughtful for t in r["metadata"]["thinking"]]
    assert not any(t[:40] in r["content"] for t in thoughts for r in rows)
    assert thoughtful[0]["content"].startswith("There are two reasonable paths:")


def test_tool_calls_and_their_results(sample):
    rows = _accepted(sample)
    search = _turn(rows, MIGRATION, 4)
    assert (search["tool_name"], search["tool_call_id"], search["tool_args"]) == (
        "web_search", "toolu_01Hq7VnR3mXc2bTg8pLs4kWz", {"query": "PostGIS 2.5 to 3 upgrade postgis_raster"})
    said, answer, result = search["content"].split("\n\n")
    assert said == "Let me look up the PostGIS upgrade notes."
    # text blocks a citation splits are one stretch of text
    assert answer.startswith("With `--link`") and answer.endswith(
        "`SELECT postgis_extensions_upgrade();` — since 3.0, rasters live in their own extension, postgis_raster.")
    assert result.startswith("[web_search result] Since 3.0, raster support is a separate extension")
    meta = search["metadata"]
    assert meta["tool_uses"] == [{"id": "toolu_01Hq7VnR3mXc2bTg8pLs4kWz", "name": "web_search",
                                  "input": {"query": "PostGIS 2.5 to 3 upgrade postgis_raster"}}]
    assert meta["tool_results"] == [{"tool_use_id": "toolu_01Hq7VnR3mXc2bTg8pLs4kWz", "name": "web_search",
                                     "is_error": False}]
    assert meta["citations"][0]["details"]["url"] == "https://postgis.example.org/upgrade"
    # a message that only calls a tool: its text is empty, its call on the turn
    artifact = _turn(rows, MIGRATION, 6)
    assert (artifact["tool_name"], artifact["tool_call_id"]) == ("artifacts", "toolu_01Nz5yTd8QeJ3wKr6vBx1cMa")
    assert artifact["tool_args"]["content"].startswith("-- on the PostgreSQL 12 primary")
    assert artifact["content"].startswith("[called artifacts(")  # what formats.common says of a tool-only turn
    # an older export: calls without ids, a failed one retried
    estimate = _turn(rows, CUTOVER, 4)
    assert (estimate["tool_name"], "tool_call_id" in estimate) == ("repl", False)
    assert "perCalMs" in estimate["tool_args"]["code"] and len(estimate["metadata"]["tool_uses"]) == 2
    assert [r["is_error"] for r in estimate["metadata"]["tool_results"]] == [True, False]
    assert estimate["content"].split("\n\n")[1:3] == [
        "About half a second for the setval calls themselves; reading the 1,400 values from 12 first adds about "
        "as much. The spike on your graph at 03:10 lines up with the nightly VACUUM of order_events and drains "
        "within minutes, so it won't hold up a 02:00 cutover.",
        "[repl error] ReferenceError: perCalMs is not defined"]
    assert estimate["content"].endswith("[repl result] 0.56 s")
    # no turn says who wrote it: every role's default speaker fits
    assert not any("speaker" in r["metadata"] for r in rows)


def test_the_user_is_the_sources_else_the_account():
    rows = _accepted(_decode(CLAUDE.read_bytes(), None))
    assert {r["user_id"] for r in rows} == {ACCOUNT}


# -- built conversations


def _message(uuid, sender="human", text="hi", created="2026-10-20T10:00:00Z", **fields):
    return {"uuid": uuid, "sender": sender, "created_at": created, "text": text,
            "content": [{"type": "text", "text": text}], **fields}


def _conversation(uuid="c1", *messages, **fields):
    return {"uuid": uuid, "name": "t", "summary": "", "created_at": "2026-10-20T09:00:00Z",
            "account": {"uuid": "acct"}, "chat_messages": list(messages), **fields}


def test_refusals_name_the_format_the_conversation_and_what_is_missing():
    data = json.dumps([
        _conversation("c1", _message("m1"), {"uuid": "m2", "text": "no sender"}, _message("m3", "assistant")),
        _conversation(None, _message("m1")),
        _conversation("c3", chat_messages=None),
        _conversation("c4", _message("m1"), account=None),
        _conversation("c5", _message("m1", "system"), 7, _message("m3", created=None), created_at=None),
    ]).encode()
    records = _decode(data, None)
    assert _refused(records) == [
        (2, "unmapped", "chat-export (Claude.ai): conversation 1 'c1': message 2 has no sender"),
        (4, "unmapped", "chat-export (Claude.ai): conversation 2 has no uuid"),
        (5, "unmapped", "chat-export (Claude.ai): conversation 3 'c3': chat_messages is null, not a list of messages"),
        (6, "unmapped", "chat-export (Claude.ai): conversation 4 'c4' names no user (no account.uuid): "
                        "set MEMORY_SOURCE_USER"),
        (7, "unmapped", "chat-export (Claude.ai): conversation 5 'c5': message 1 has sender \"system\", "
                        "not human or assistant"),
        (8, "unmapped", "chat-export (Claude.ai): conversation 5 'c5': message 2 is a number, not an object"),
        (9, "unmapped", "chat-export (Claude.ai): conversation 5 'c5': message 3 has no created_at, "
                        "nor has its conversation"),
    ]
    assert {r.pre_reason for r in records if r.pre_reason} == {QuarantineReason.UNMAPPED}
    # a refused message keeps its seq: fixing it later leaves the others' as they are
    assert [(r["session_id"], r["seq"]) for r in _accepted(records)] == [("c1", 1), ("c1", 3)]
    # the refused record is the message, or the whole conversation, as written
    assert json.loads(records[1].raw) == {"uuid": "m2", "text": "no sender"}
    assert json.loads(records[3].raw)["chat_messages"][0]["uuid"] == "m1"
    # MEMORY_SOURCE_USER names the user of a conversation without an account
    assert _accepted(_decode(data, "marta"))[2]["session_id"] == "c4"


def test_empty_messages_are_counted_once_and_take_no_seq():
    root = "00000000-0000-4000-8000-000000000000"
    data = json.dumps([_conversation(
        "c1", _message("m1", parent_message_uuid=root),
        _message("m2", "assistant", "", content=[{"type": "text", "text": "  "}], parent_message_uuid="m1"),
        _message("m3", "assistant", "ok", parent_message_uuid="m2"),
        _message("m4", "human", "again", parent_message_uuid="m2"))]).encode()
    records = _decode(data)
    assert [(r.pre_reason, r.pre_detail) for r in records if r.pre_reason] == [(SKIPPED_EVENT, "empty_message")]
    assert _sessions(_accepted(records)) == {
        "c1": [(1, "user", None, None), (2, "user", None, None)],  # to the last message
        "c1~m3": [(2, "assistant", "c1", 1)],
    }
    # a thought alone, a file alone, a tool call alone are something
    for kept in ({"content": [{"type": "thinking", "thinking": "hm"}]}, {"files": [{"file_name": "a.png"}]},
                 {"content": [{"type": "tool_use", "name": "web_search", "input": {}}]}):
        [record] = _decode(json.dumps([_conversation("c", _message("m", "assistant", "", **kept))]).encode())
        assert record.pre_reason is None, kept


def test_a_tree_of_parents_its_current_leaf_and_its_faults():
    def tree(*messages, **fields):
        return json.dumps([_conversation("c", *messages, **fields)]).encode()

    m1, m2 = _message("m1", parent_message_uuid=None), _message("m2", "assistant", "r2", parent_message_uuid="m1")
    m2b = _message("m2b", "assistant", "r2b", parent_message_uuid="m1")
    # the leaf the export names current, else the last message
    assert _sessions(_accepted(_decode(tree(m1, m2, m2b)))) == {
        "c": [(1, "user", None, None), (2, "assistant", None, None)],
        "c~m2": [(2, "assistant", "c", 1)]}
    rows = _accepted(_decode(tree(m1, m2, m2b, current_leaf_message_uuid="m2")))
    assert [(r["session_id"], r["content"]) for r in rows] == [("c", "hi"), ("c", "r2"), ("c~m2b", "r2b")]
    # messages in a tree need a uuid of their own
    records = _decode(tree(m1, {**m2, "uuid": None}, {**m2b, "uuid": "m1"}))
    assert [d for _, _, d in _refused(records)] == [
        "chat-export (Claude.ai): conversation 1 'c': message 2 has no uuid, so no place in the tree its "
        "messages' parent_message_uuid make",
        "chat-export (Claude.ai): conversation 1 'c': message 3 repeats the uuid of message 1"]
    assert [r["content"] for r in _accepted(records)] == ["hi"]
    # parents in a loop
    looped = _decode(tree({**m1, "parent_message_uuid": "m2"}, m2))
    assert [d for _, _, d in _refused(looped)] == ["chat-export (Claude.ai): conversation 1 'c': the parents of "
                                                    "message 'm2' run in a loop"]
    # without parents: the messages in their order
    flat = _accepted(_decode(tree(_message("x1"), _message("x2", "assistant", "r"), _message("x3", text="q"))))
    assert [(r["seq"], r["content"]) for r in flat] == [(1, "hi"), (2, "r"), (3, "q")]


def test_a_forced_chat_export_on_claude_ai_and_chatgpt_side_by_side():
    """One file may hold both kinds: each conversation is read by its own shape."""
    chatgpt = json.loads(CHATGPT.read_text())[0]
    data = json.dumps([chatgpt, _conversation("c", _message("m1"))]).encode()
    rows = _accepted(_decode(data, "u", "chat-export"))
    assert {r["session_id"] for r in rows} == {chatgpt["id"], "c"}
    assert [r["metadata"]["message_uuid"] for r in rows if r["session_id"] == "c"] == ["m1"]

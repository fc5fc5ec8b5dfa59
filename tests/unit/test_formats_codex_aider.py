"""The codex (Codex CLI rollout) and aider (`.aider.chat.history.md`) formats decoded into
canonical records (no database): the samples' turns, skipped events and speakers, detection,
and the refusals' details (docs/formats.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import jsonschema

from memory_pipelines import formats
from memory_pipelines.formats import FormatOptions, RawRecord, decode_records, detect_format, is_transcript_name
from memory_pipelines.records import SKIPPED_EVENT, QuarantineReason

SAMPLES = Path(formats.__file__).parent.parent / "sample_data"
SESSION = "0199c8a4-5e2b-7d31-9f6a-3c8e21b0d4f7"
CODEX = SAMPLES / "formats" / "codex" / f"rollout-2026-10-09T10-41-07-{SESSION}.jsonl"
AIDER = SAMPLES / "formats" / "aider" / ".aider.chat.history.md"
SCHEMA = jsonschema.Draft202012Validator(
    json.loads((SAMPLES.parent / "schemas" / "transcript_message.schema.json").read_text()))
FIRST_RUN, SECOND_RUN = "aider@2026-10-02T14:05:11", "aider@2026-10-03T09:12:40"


def _decode(path: Path, fmt: str | None = None, user: str | None = "mara") -> list[RawRecord]:
    return list(decode_records(path.name, path.read_bytes(), fmt, FormatOptions(user_id=user)))


def _turns(records: list[RawRecord]) -> list[dict]:
    """The accepted records, each valid by the shipped JSON Schema, with the line it came from."""
    turns = []
    for record in records:
        if record.pre_reason is None:
            turn = json.loads(record.raw)
            SCHEMA.validate(turn)
            turns.append(turn | {"line": record.line})
    return turns


def _skipped(records: list[RawRecord]) -> Counter:
    return Counter(r.pre_detail for r in records if r.pre_reason == SKIPPED_EVENT)


def _refused(records: list[RawRecord]) -> list[tuple[int, str, str]]:
    return [(r.line, r.pre_reason, r.pre_detail) for r in records if r.pre_reason not in (None, SKIPPED_EVENT)]


def _rollout(*items: tuple[str, dict | str], ts: str = "2026-10-09T08:00:00.000Z") -> bytes:
    return "".join(json.dumps({"timestamp": ts, "type": kind, "payload": payload}) + "\n"
                   for kind, payload in items).encode()


def _meta(session: str = "s-1") -> tuple[str, dict]:
    return "session_meta", {"id": session, "timestamp": "2026-10-09T08:00:00.000Z", "cwd": "/src/x",
                            "originator": "codex_cli_rs", "cli_version": "0.46.0"}


def _say(role: str, text: str) -> tuple[str, dict]:
    part = "input_text" if role in ("user", "developer") else "output_text"
    return "response_item", {"type": "message", "role": role, "content": [{"type": part, "text": text}]}


# -- codex: the sample


def test_codex_sample_decodes_to_the_turns_written_and_every_line_is_accounted_for():
    records = _decode(CODEX)
    turns = _turns(records)
    lines = [json.loads(line) for line in CODEX.read_text().splitlines() if line.strip()]
    assert _refused(records) == []
    assert Counter(t["role"] for t in turns) == {"assistant": 8, "tool": 6, "user": 4}
    assert _skipped(records) == {"event_msg:token_count": 9, "event_msg:agent_reasoning": 3, "turn_context": 2,
                                 "event_msg:user_message": 2, "event_msg:agent_message": 2, "session_meta": 1,
                                 "response_item:ghost_snapshot": 1}
    # every line gives one record but the reasoning, which merges into the assistant turn after it
    reasoning = [n for n, line in enumerate(lines, start=1) if line["payload"].get("type") == "reasoning"]
    assert len(reasoning) == 4 and len(records) + len(reasoning) == len(lines) == 42
    assert sorted(r.line for r in records) == [n for n in range(1, 43) if n not in reasoning]
    assert [t["seq"] for t in turns] == list(range(1, 19))
    assert {(t["session_id"], t["user_id"]) for t in turns} == {(SESSION, "mara")}
    # each turn keeps its line's own time
    assert turns[0]["ts"] == "2026-10-09T08:41:07.390Z" and turns[-1]["ts"] == "2026-10-09T08:46:20.812Z"


def test_codex_harness_text_is_a_user_turn_the_system_spoke_and_the_first_turn_keeps_the_session():
    turns = _turns(_decode(CODEX))
    users = [t for t in turns if t["role"] == "user"]
    assert [t.get("metadata", {}).get("speaker") for t in users] == ["system", "system", None, None]
    assert users[0]["content"].startswith("<user_instructions>") and "<cwd>" in users[1]["content"]
    assert users[2]["content"].startswith("add a --dry-run flag to `tidyfiles sort`")
    assert "speaker" not in users[2].get("metadata", {})
    assert turns[0]["metadata"]["session"] == {
        "cwd": "/home/mara/src/tidyfiles", "originator": "codex_cli_rs", "cli_version": "0.46.0", "source": "cli",
        "model_provider": "openai", "model": "gpt-5-codex", "effort": "medium", "approval_policy": "on-request",
        "git": {"commit_hash": "5d1c0e7a9b3f2e4d6c8a0b1e3f5a7c9d2e4f6a8b", "branch": "main",
                "repository_url": "git@github.com:mara-k/tidyfiles.git"},
        "sandbox_policy": {"type": "workspace-write", "network_access": False, "exclude_tmpdir_env_var": False,
                           "exclude_slash_tmp": False}}
    assert all("session" not in t.get("metadata", {}) for t in turns[1:])


def test_codex_a_turn_that_only_calls_a_tool_names_the_call_and_its_answer_names_the_tool():
    turns = _turns(_decode(CODEX))
    read = next(t for t in turns if t["line"] == 10)
    assert (read["role"], read["tool_name"], read["tool_call_id"]) == ("assistant", "shell",
                                                                       "call_hV3kP9sQ2mX7aL4nR8tY1bW6")
    assert read["tool_args"] == {"command": ["bash", "-lc", "sed -n '1,80p' tidyfiles/cli.py"],
                                 "workdir": "/home/mara/src/tidyfiles"}
    # its rendering needs no content: the call is in metadata.tool_uses, as agent-events keeps it
    assert read["metadata"]["tool_uses"] == [{"id": read["tool_call_id"], "name": "shell", "input": read["tool_args"]}]
    assert read["content"] == "" or read["content"].startswith("[called shell(")
    answer = next(t for t in turns if t["line"] == 11)
    assert (answer["role"], answer["tool_name"], answer["tool_call_id"]) == ("tool", "shell", read["tool_call_id"])
    assert answer["content"].startswith("import argparse\n") and answer["metadata"] == {"exit_code": 0}
    patch = next(t for t in turns if t["line"] == 15)
    assert patch["tool_name"] == "apply_patch" and patch["tool_args"]["input"].startswith(
        "*** Begin Patch\n*** Update File: tidyfiles/cli.py")
    assert next(t for t in turns if t["line"] == 16)["content"] == \
        "Success. Updated the following files:\nM tidyfiles/cli.py\n"
    failed = next(t for t in turns if t["line"] == 19)
    assert failed["metadata"] == {"is_error": True, "exit_code": 1}
    assert "1 failed, 5 passed" in failed["content"] and not failed["content"].startswith("{")
    assert [t["line"] for t in turns if t.get("metadata", {}).get("is_error")] == [19]


def test_codex_reasoning_is_kept_in_the_next_assistant_turn_and_never_as_content():
    records = _decode(CODEX)
    turns = _turns(records)
    kept = {t["line"]: t["metadata"]["reasoning"] for t in turns if "reasoning" in t.get("metadata", {})}
    assert sorted(kept) == [10, 15, 23]  # the fourth reasoning (line 36) has no summary: nothing to keep
    assert kept[10].startswith("**Inspecting the sort command**\n\nI'll read `tidyfiles/cli.py`")
    assert not any("**Inspecting" in t["content"] or "**Planning" in t["content"] for t in turns)
    assert not any("gAAAAAB" in r.raw for r in records)  # the encrypted reasoning is not kept anywhere


def test_codex_detection_and_what_is_not_codex():
    assert detect_format(CODEX.name, CODEX.read_bytes()) == "codex"
    # a rollout opening with display events is told by its first line already
    assert detect_format("r.jsonl", _rollout(("event_msg", {"type": "token_count", "info": None}))) == "codex"
    for path, expected in ((SAMPLES / "formats" / "openai" / "chat_log.jsonl", "openai"),
                           (SAMPLES / "formats" / "agent_events" / "session.jsonl", "agent-events"),
                           (SAMPLES / "transcripts" / "alice" / "2026-10-week1.jsonl", "canonical")):
        assert detect_format(path.name, path.read_bytes()) == expected
    # a type codex does not write, or no payload object: not a rollout line
    assert detect_format("e.jsonl", _rollout(("summary", {"summary": "x"}))) != "codex"
    assert detect_format("e.jsonl", b'{"timestamp": "t", "type": "event_msg", "payload": "x"}\n') != "codex"


# -- codex: mapping details and refusals


def test_codex_refusals_name_the_format_the_line_and_what_is_missing():
    data = (_rollout(_meta(), ("response_item", {"role": "user", "content": []}), ("response_item", "text"),
                     ("world_state", {"x": 1}), ("event_msg", {"message": "hi"}),
                     ("response_item", {"type": "message", "role": "robot", "content": []}),
                     ("response_item", {"type": "message", "role": "user", "content": "hi"}),
                     ("response_item", {"type": "function_call", "arguments": "{}", "call_id": "c1"}),
                     ("response_item", {"type": "function_call_output", "output": "ok"}),
                     _say("user", "still here"))
            + b'{"timestamp": "t", "payload": {}}\n{"type": broken\n'
            + b'{"type": "response_item", "payload": {"type": "message", "role": "user", "content": []}}\n')
    records = list(decode_records("r.jsonl", data, "codex", FormatOptions(user_id="mara")))
    assert _refused(records) == [
        (2, "unmapped", "codex: line 2: response_item payload has no type"),
        (3, "unmapped", "codex: line 3: response_item payload is a string, not an object"),
        (4, "unmapped", "codex: line 4: unknown rollout item type 'world_state' (known: session_meta, "
                        "response_item, turn_context, event_msg, compacted)"),
        (5, "unmapped", "codex: line 5: event_msg payload has no type"),
        (6, "unmapped", 'codex: line 6: message role "robot" is none of user, assistant, developer, system'),
        (7, "unmapped", "codex: line 7: message content is a string, not a list of parts"),
        (8, "unmapped", "codex: line 8: function_call has no name"),
        (9, "unmapped", "codex: line 9: function_call_output has no call_id"),
        (11, "unmapped", 'codex: line 11: no type: a rollout line is {"timestamp": ..., "type": ..., '
                         '"payload": {...}}'),
        (12, "malformed_json", "codex: line 12: not valid JSON: Expecting value at column 10"),
        (13, "unmapped", "codex: line 13: no timestamp"),
    ]
    # a refused turn keeps its seq: fixing it later renumbers nothing
    [turn] = _turns(records)
    assert (turn["line"], turn["seq"], turn["content"]) == (10, 5, "still here")
    assert all(r.line > 0 for r in records) and len({r.line for r in records}) == len(records) == 13


def test_codex_without_a_user_refuses_the_turns_and_still_counts_the_events():
    records = _decode(CODEX, user=None)
    refused = _refused(records)
    assert len(refused) == 18 and {reason for _, reason, _ in refused} == {"unmapped"}
    assert refused[0] == (2, "unmapped", "codex: line 2: no user id: a Codex rollout names none; "
                                         "set MEMORY_SOURCE_USER")
    # the reasoning no accepted assistant turn took is skipped too: every line still gives one record
    assert _skipped(records)["response_item:reasoning"] == 4 and len(records) == 42 and _turns(records) == []


def test_codex_session_id_falls_back_to_the_file_names_uuid():
    data = _rollout(_say("user", "hello"))
    [turn] = _turns(list(decode_records(f"rollout-2026-10-09T10-41-07-{SESSION.upper()}.jsonl", data, "codex",
                                        FormatOptions(user_id="mara"))))
    assert turn["session_id"] == SESSION and "metadata" not in turn
    [nameless] = decode_records("session.jsonl", data, "codex", FormatOptions(user_id="mara"))
    assert (nameless.pre_reason, nameless.pre_detail) == (
        "unmapped", "codex: line 1: no session id: no session_meta line names one, and the file name holds no uuid")


def test_codex_roles_calls_and_outputs_of_every_kind():
    image = {"type": "input_image", "image_url": "data:image/png;base64," + "A" * 900}
    data = _rollout(
        _meta(), ("compacted", {"message": "summary of the earlier turns"}),
        _say("developer", "<permissions instructions>on-request</permissions instructions>"),
        ("response_item", {"type": "message", "role": "user",
                           "content": [{"type": "input_text", "text": "what is on the screenshot?"}, image]}),
        ("response_item", {"type": "reasoning", "summary": [], "content": None, "encrypted_content": "e"}),
        _say("user", "<turn_aborted>\nThe user interrupted the previous turn.\n</turn_aborted>"),
        ("response_item", {"type": "local_shell_call", "call_id": "ls1", "status": "completed",
                           "action": {"type": "exec", "command": ["ls"], "timeout_ms": None}}),
        ("response_item", {"type": "function_call_output", "call_id": "ls1",
                           "output": "Exit code: 2\nWall time: 0.1 seconds\nOutput:\nls: cannot open"}),
        ("response_item", {"type": "web_search_call", "status": "completed",
                           "action": {"type": "search", "query": "argparse dry run"}}),
        ("response_item", {"type": "function_call", "name": "mcp__files__read", "arguments": "{broken",
                           "call_id": "m1"}),
        ("response_item", {"type": "function_call_output", "call_id": "m1",
                           "output": {"content": "no such file", "success": False}}),
        ("response_item", {"type": "function_call_output", "call_id": "m1",
                           "output": [{"type": "input_text", "text": "page 1"}, image]}),
        ("response_item", {"type": "reasoning", "summary": [{"type": "summary_text", "text": "**Wrapping up**"}]}))
    records = list(decode_records("r.jsonl", data, "codex", FormatOptions(user_id="mara")))
    turns = _turns(records)
    assert _refused(records) == []
    # the reasoning before a user turn, and the one the file ends with, have no assistant turn
    assert _skipped(records) == {"session_meta": 1, "compacted": 1, "response_item:reasoning": 2}
    developer, asked, aborted, shell, shell_out, search, call, failed, pages = turns
    assert (developer["role"], developer["metadata"]) == ("system", {"source_role": "developer", "session": {
        "cwd": "/src/x", "originator": "codex_cli_rs", "cli_version": "0.46.0"}})
    assert asked["content"] == "what is on the screenshot?" and "speaker" not in asked["metadata"]
    assert asked["metadata"]["non_text_parts"][0]["image_url"].endswith("[922 characters, cut]")
    assert aborted["metadata"]["speaker"] == "system"
    assert (shell["tool_name"], shell["tool_call_id"], shell["tool_args"]) == (
        "local_shell", "ls1", {"type": "exec", "command": ["ls"], "timeout_ms": None})
    assert (shell_out["tool_name"], shell_out["metadata"]) == ("local_shell", {"is_error": True, "exit_code": 2})
    assert (search["tool_name"], search["tool_args"], search.get("tool_call_id")) == (
        "web_search", {"type": "search", "query": "argparse dry run"}, None)
    assert call["tool_args"] == {"_raw": "{broken"} and call["metadata"]["tool_uses"][0]["name"] == "mcp__files__read"
    assert (failed["tool_name"], failed["content"], failed["metadata"]) == (
        "mcp__files__read", "no such file", {"is_error": True})
    assert pages["content"] == "page 1" and len(pages["metadata"]["non_text_parts"]) == 1
    assert [t["seq"] for t in turns] == list(range(1, 10))


# -- aider: the sample


def test_aider_sample_decodes_to_each_runs_turns_in_order():
    records = _decode(AIDER)
    turns = _turns(records)
    assert _refused(records) == [] and _skipped(records) == {"chat_started": 2}
    # (line, what) of every record: a run's header is skipped; its turns keep their first line
    assert [(r.line, json.loads(r.raw).get("role", "header")) for r in records] == [
        (2, "header"), (4, "tool"), (12, "user"), (14, "assistant"), (61, "tool"), (66, "user"), (67, "tool"),
        (70, "user"), (72, "assistant"), (76, "tool"), (80, "assistant"), (114, "tool"),
        (120, "header"), (122, "tool"), (129, "user"), (130, "tool"), (132, "user"), (135, "assistant"),
        (175, "tool"), (184, "user")]
    assert [(t["session_id"], t["seq"]) for t in turns] == \
        [(FIRST_RUN, n) for n in range(1, 12)] + [(SECOND_RUN, n) for n in range(1, 8)]
    # every turn of a run is dated by its start (aider writes no other time): seq orders them
    assert {(t["session_id"], t["ts"]) for t in turns} == {(FIRST_RUN, "2026-10-02T14:05:11"),
                                                           (SECOND_RUN, "2026-10-03T09:12:40")}
    assert {t["user_id"] for t in turns} == {"mara"} and all("metadata" not in t for t in turns)
    # every non-blank line is a header or lies in the turn that starts at or before it
    text = AIDER.read_text().split("\n")
    starts = sorted(r.line for r in records)
    assert all(any(s <= n for s in starts) for n, line in enumerate(text, start=1) if line.strip())


def test_aider_turns_read_what_each_kind_of_line_holds():
    turns = {(t["session_id"], t["seq"]): t for t in _turns(_decode(AIDER))}
    banner = turns[FIRST_RUN, 1]["content"].split("\n")
    assert banner[0] == "/home/mara/.local/bin/aider --model sonnet backup.py" and len(banner) == 7
    assert banner[-1] == "Added backup.py to the chat."  # the `> ` and the two spaces each line ends with go
    assert turns[FIRST_RUN, 2]["content"] == \
        "add a --dry-run flag to backup.py that lists what would be copied without copying anything"
    reply = turns[FIRST_RUN, 3]["content"]
    assert reply.startswith("I'll add a `--dry-run` option") and reply.endswith(">>>>>>> REPLACE\n```")
    assert reply.count("<<<<<<< SEARCH") == 3
    assert turns[FIRST_RUN, 9]["content"] == (
        "Tokens: 4.6k sent, 61 received. Cost: $0.01 message, $0.03 session.\ntests/test_backup.py\n"
        "Add file to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: y")
    # what the user typed on two lines is one message
    assert turns[SECOND_RUN, 4]["content"] == (
        "the dry run lines should go to stderr, so they can't end up in a file list someone pipes somewhere\n"
        "and add a short dry run section to the README")
    # a fenced edit of a markdown file holds lines like the user's and aider's: they stay the reply's
    edit = turns[SECOND_RUN, 5]["content"]
    assert "\n#### Dry run\n" in edit and "\n> Nothing is copied: each file" in edit
    assert (turns[SECOND_RUN, 5]["role"], turns[SECOND_RUN, 6]["role"]) == ("assistant", "tool")
    # a multi-line tool_output marks only its first line: the next one is still aider's
    assert turns[SECOND_RUN, 6]["content"].startswith(
        "Tokens: 6.1k sent, 3.2k cache write, 2.4k cache hit, 231 received.\nCost: $0.02 message, $0.02 session.\n"
        "README.md\n")
    assert turns[SECOND_RUN, 7]["content"] == "/exit"


def test_aider_detection_is_by_name():
    assert detect_format(AIDER.name, AIDER.read_bytes()) == "aider"
    assert detect_format("proj/.AIDER.CHAT.HISTORY.MD", b"") == "aider"
    assert detect_format("notes/design.chat.history.md", b"# notes") == "aider"
    assert all(is_transcript_name(n) for n in (".aider.chat.history.md", "a/b/.aider.chat.history.md",
                                               "work.chat.history.md"))
    assert not any(is_transcript_name(n) for n in ("README.md", "notes.md", ".aider.input.history",
                                                   "chat.history.md.bak", ".aider.chat.history.markdown"))


# -- aider: refusals and edge cases


def test_aider_refusals_name_the_lines_and_what_is_missing():
    data = (b"leftover notes\n\n#### a question\n"
            b"\n# aider chat started at yesterday\n\n#### lost  \n\nan answer\n"
            b"\n# aider chat started at 2026-10-02 14:05:11\n\n#### hi  \n\nhello\n")
    records = list(decode_records("x.aider.chat.history.md", data, None, FormatOptions(user_id="mara")))
    assert _refused(records) == [
        (1, "unmapped", 'aider: lines 1-3: text before the first "# aider chat started at" header belongs to no '
                        "session (it has no start time)"),
        (5, "unmapped", "aider: line 5: the session's start time 'yesterday' is not YYYY-MM-DD HH:MM:SS"),
    ]
    assert records[0].raw == "leftover notes\n\n#### a question"
    assert records[1].raw.startswith("# aider chat started at yesterday") and "an answer" in records[1].raw
    assert [(t["line"], t["role"], t["content"]) for t in _turns(records)] == [(13, "user", "hi"),
                                                                              (15, "assistant", "hello")]
    no_user = _decode(AIDER, user=None)
    assert len(_refused(no_user)) == 18 and _skipped(no_user) == {"chat_started": 2}
    assert _refused(no_user)[0] == (4, "unmapped", "aider: line 4: no user id: an aider chat history names none; "
                                                   "set MEMORY_SOURCE_USER")


def test_aider_forced_on_another_file_refuses_it_and_never_raises():
    openai = SAMPLES / "formats" / "openai" / "chat_log.jsonl"
    [whole] = _decode(openai, "aider")
    assert whole.pre_reason == QuarantineReason.UNMAPPED and whole.pre_detail.startswith("aider: lines 1-")
    assert list(decode_records("empty.aider.chat.history.md", b"", None, FormatOptions(user_id="mara"))) == []
    codex_as_aider = _decode(CODEX, "aider")
    assert len(codex_as_aider) == 1 and codex_as_aider[0].pre_reason == "unmapped"


def test_aider_a_start_time_written_twice_continues_its_session_and_an_unclosed_fence_ends_nowhere():
    data = (b"\n# aider chat started at 2026-10-02 14:05:11\n\n#### one  \n\n```python\nprint(1)\n\n"
            b"> Tokens: 1k sent, 9 received.  \n"
            b"\n# aider chat started at 2026-10-02 14:05:11\n\n#### two  \n#### \xe2\x80\x94 and more  \n#### <blank>  \n")
    turns = _turns(list(decode_records(".aider.chat.history.md", data, None, FormatOptions(user_id="mara"))))
    assert [(t["session_id"], t["seq"], t["role"], t["content"]) for t in turns] == [
        (FIRST_RUN, 1, "user", "one"), (FIRST_RUN, 2, "assistant", "```python\nprint(1)"),
        (FIRST_RUN, 3, "tool", "Tokens: 1k sent, 9 received."),
        (FIRST_RUN, 4, "user", "two\n\u2014 and more\n<blank>")]

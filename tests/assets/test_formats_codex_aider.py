"""The `transcripts` asset over a folder holding a Codex CLI rollout and an aider chat history
(docs/formats.md, codex and aider): each detected, archived as its sessions, the events that
are no turn counted as skipped, nothing quarantined."""

from __future__ import annotations

import shutil
from collections import Counter

import psycopg

from assets.ingestion import transcripts
from memory_pipelines.config import PACKAGE_DIR
from tests.helpers import materialization_metadata, materialize_partitions

FORMATS = PACKAGE_DIR / "sample_data" / "formats"
SESSION = "0199c8a4-5e2b-7d31-9f6a-3c8e21b0d4f7"
FIRST_RUN, SECOND_RUN = "aider@2026-10-02T14:05:11", "aider@2026-10-03T09:12:40"
# aider's two runs (its local times, read in MEMORY_TIMEZONE: UTC), then the rollout
DAYS = ["2026-10-02", "2026-10-03", "2026-10-09"]


def test_a_codex_rollout_and_an_aider_history_are_archived_as_their_sessions(database_url, tmp_path):
    folder = tmp_path / "agents"
    shutil.copytree(FORMATS / "codex", folder / "codex")
    # as aider leaves it: a dot-file at the root of the repository it ran in
    shutil.copytree(FORMATS / "aider", folder / "backup-tool")
    results = materialize_partitions([transcripts], DAYS, database_url, folder, source_user="mara")
    counts = [materialization_metadata(r, "transcripts") for r in results]
    for c in counts:
        assert c["read"] == c["stored"] + c["duplicate"] + c["quarantined"] + c["forgotten"] + c["superseded"]
    assert [c["stored"] for c in counts] == [11, 7, 18] and sum(c["quarantined"] for c in counts) == 0
    assert sum((Counter(c["events_skipped"]) for c in counts), Counter()) == Counter({
        "chat_started": 2, "event_msg:token_count": 9, "event_msg:agent_reasoning": 3, "turn_context": 2,
        "event_msg:user_message": 2, "event_msg:agent_message": 2, "session_meta": 1,
        "response_item:ghost_snapshot": 1})
    with psycopg.connect(database_url) as conn:
        per_session = dict(conn.execute("SELECT session_id, count(*) FROM messages GROUP BY 1").fetchall())
        sources = dict(conn.execute("SELECT session_id, min(source_file) FROM messages GROUP BY 1").fetchall())
        roles = conn.execute("SELECT session_id, role, count(*) FROM messages GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
        quarantined = conn.execute("SELECT count(*) FROM quarantine").fetchone()[0]
        users = {row[0] for row in conn.execute("SELECT DISTINCT user_id FROM messages")}
        harness = conn.execute("SELECT seq FROM messages WHERE metadata->>'speaker' = 'system' ORDER BY seq").fetchall()
        call = conn.execute("SELECT tool_name, tool_args, tool_call_id, metadata->'reasoning' FROM messages "
                            "WHERE session_id = %s AND seq = 4", (SESSION,)).fetchone()
        answer = conn.execute("SELECT role, tool_name, tool_call_id FROM messages WHERE session_id = %s AND seq = 5",
                              (SESSION,)).fetchone()
        failed = conn.execute("SELECT seq FROM messages WHERE metadata->>'is_error' = 'true'").fetchall()
        started = conn.execute("SELECT DISTINCT ts FROM messages WHERE session_id = %s", (FIRST_RUN,)).fetchall()
    assert per_session == {SESSION: 18, FIRST_RUN: 11, SECOND_RUN: 7}
    assert sources == {SESSION: f"codex/rollout-2026-10-09T10-41-07-{SESSION}.jsonl",
                       FIRST_RUN: "backup-tool/.aider.chat.history.md", SECOND_RUN: "backup-tool/.aider.chat.history.md"}
    assert roles == [(SESSION, "assistant", 8), (SESSION, "tool", 6), (SESSION, "user", 4),
                     (FIRST_RUN, "assistant", 3), (FIRST_RUN, "tool", 5), (FIRST_RUN, "user", 3),
                     (SECOND_RUN, "assistant", 1), (SECOND_RUN, "tool", 3), (SECOND_RUN, "user", 3)]
    assert quarantined == 0 and users == {"mara"}
    # Codex's own user messages (the AGENTS.md text, the environment) are the system speaking
    assert harness == [(1,), (2,)]
    name, args, call_id, reasoning = call
    assert name == "shell" and args["command"][-1] == "sed -n '1,80p' tidyfiles/cli.py"
    assert reasoning.startswith("**Inspecting the sort command**")
    assert answer == ("tool", "shell", call_id) and failed == [(9,)]
    assert [ts.isoformat() for (ts,) in started] == ["2026-10-02T14:05:11+00:00"]

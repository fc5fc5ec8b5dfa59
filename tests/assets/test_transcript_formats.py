"""The `transcripts` asset over a folder of the formats real agents write (one sample file
each, docs/formats.md): detected per file, archived, forks of a chat-export tree declared."""

from __future__ import annotations

import shutil

import psycopg

from assets.ingestion import transcripts
from memory_pipelines.config import PACKAGE_DIR, SAMPLE_TRANSCRIPTS
from tests.helpers import materialization_metadata, materialize_partitions

FORMATS = PACKAGE_DIR / "sample_data" / "formats"
DAYS = ["2026-10-04", "2026-10-06", "2026-10-08", "2026-10-12", "2026-10-14"]


def test_every_sample_format_is_archived_and_a_tree_export_declares_its_branch_as_a_fork(database_url, tmp_path):
    folder = tmp_path / "mixed"
    for kind in ("openai", "agent_events", "chat_export"):
        shutil.copytree(FORMATS / kind, folder / kind)
    results = materialize_partitions([transcripts], DAYS, database_url, folder, source_user="lena")
    counts = [materialization_metadata(r, "transcripts") for r in results]
    # counts add up: the growing chat log re-sends earlier messages (duplicates); the coding
    # log's summary event holds no message (skipped, by kind: not read, not quarantined)
    assert sum((c["events_skipped"].get("summary", 0) for c in counts)) == 1
    for c in counts:
        assert c["read"] == c["stored"] + c["duplicate"] + c["quarantined"] + c["forgotten"] + c["superseded"]
    assert sum(c["duplicate"] for c in counts) > 0
    with psycopg.connect(database_url) as conn:
        per_source = dict(conn.execute(
            "SELECT split_part(source_file, '/', 1), count(DISTINCT session_id) FROM messages GROUP BY 1").fetchall())
        forks = conn.execute("SELECT session_id, parent_session_id, fork_seq FROM session_forks").fetchall()
        fork_turns = conn.execute(
            "SELECT min(m.seq) FROM messages m JOIN session_forks f USING (session_id)").fetchone()[0]
        refused = conn.execute("SELECT source_file, reason, detail FROM quarantine").fetchall()
        users = {row[0] for row in conn.execute("SELECT DISTINCT user_id FROM messages")}
        tool = conn.execute("SELECT tool_name, tool_args, metadata FROM messages WHERE source_file LIKE 'openai/%' "
                            "AND tool_name IS NOT NULL AND role = 'assistant' ORDER BY session_id, seq LIMIT 1").fetchone()
        failed = conn.execute("SELECT count(*) FROM messages WHERE source_file LIKE 'agent_events/%' "
                              "AND role = 'tool' AND metadata->>'is_error' = 'true'").fetchone()[0]
    # chat log: two conversations; coding log: one session; export: two conversations and a fork
    assert per_source == {"openai": 2, "agent_events": 1, "chat_export": 3}
    [(fork, parent, fork_seq)] = forks
    assert fork.startswith(parent + "~") and fork_seq == 2 and fork_turns == 3
    assert refused == []
    assert "lena" in users and {"priya"} <= users  # the chat log names its users; the others take MEMORY_SOURCE_USER
    name, args, metadata = tool
    assert name and isinstance(args, dict) and metadata["tool_calls"][0]["function"]["name"] == name
    assert failed == 1


def test_a_forced_format_that_does_not_fit_quarantines_with_a_reason(database_url, tmp_path):
    folder = tmp_path / "canonical"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    [result] = materialize_partitions([transcripts], ["2026-10-04"], database_url, folder, format="openai")
    counts = materialization_metadata(result, "transcripts")
    assert counts["stored"] == 0 and counts["quarantined"] == counts["read"] > 0
    with psycopg.connect(database_url) as conn:
        reasons = {row[0] for row in conn.execute("SELECT DISTINCT reason FROM quarantine")}
    assert reasons == {"unmapped"}


def test_an_export_written_again_quarantines_a_new_refusal_where_an_old_one_stood(database_url, tmp_path):
    """conversations.json exported again: another conversation is refused at the same record
    number for the same reason; both refusals are kept, and the same one again adds nothing."""
    import json

    folder = tmp_path / "export"
    folder.mkdir()
    export = folder / "conversations.json"

    def conversation(cid: str, user: str | None) -> dict:
        return {"id": cid, "title": "t", "create_time": 1791100000.0, "current_node": "n1", "user_id": user,
                "mapping": {"n1": {"id": "n1", "parent": None, "children": [], "message": {
                    "id": "n1", "author": {"role": "user"}, "create_time": 1791100000.0,
                    "content": {"content_type": "text", "parts": ["hello"]}}}}}

    for written in ([conversation("c1", None)], [conversation("c2", None)], [conversation("c2", None)]):
        export.write_text(json.dumps(written))
        [result] = materialize_partitions([transcripts], ["2026-10-04"], database_url, folder)
        assert materialization_metadata(result, "transcripts")["quarantined"] == 1
    with psycopg.connect(database_url) as conn:
        refused = conn.execute("SELECT source_line, reason, detail FROM quarantine ORDER BY id").fetchall()
    assert [(line, reason) for line, reason, _ in refused] == [(1, "unmapped"), (1, "unmapped")]
    assert "'c1'" in refused[0][2] and "'c2'" in refused[1][2]

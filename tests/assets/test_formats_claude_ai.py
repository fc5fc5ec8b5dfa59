"""The `transcripts` asset over a Claude.ai data export (docs/formats.md, chat-export):
detected, archived per conversation, the edited question's first version declared as a fork,
the empty message counted as skipped, nothing quarantined."""

from __future__ import annotations

import shutil
from collections import Counter

import psycopg

from assets.ingestion import transcripts
from memory_pipelines.config import PACKAGE_DIR
from tests.helpers import materialization_metadata, materialize_partitions

SAMPLE = PACKAGE_DIR / "sample_data" / "formats" / "claude_ai"
DAYS = ["2026-10-20", "2026-10-21", "2026-10-22"]
MIGRATION = "d41a7c2e-6b3f-4e90-8a15-2c7f0e9b3d61"
ROLLBACK = f"{MIGRATION}~d41a7c2e-0a06-4c1e-9b7d-3f2a1e0d9c06"
CUTOVER = "5f83b0e4-2d71-4c9a-9e36-b18d4a07c2f5"
SLOW = "a9c06e52-71bd-4f3e-8d24-3e6b5f1a8c07"


def test_a_claude_ai_export_is_archived_with_its_fork_and_nothing_quarantined(database_url, tmp_path):
    folder = tmp_path / "claude"
    shutil.copytree(SAMPLE, folder)
    results = materialize_partitions([transcripts], DAYS, database_url, folder, source_user="marta")
    counts = [materialization_metadata(r, "transcripts") for r in results]
    for c in counts:
        assert c["read"] == c["stored"] + c["duplicate"] + c["quarantined"] + c["forgotten"] + c["superseded"]
    assert [c["stored"] for c in counts] == [10, 9, 6] and sum(c["quarantined"] for c in counts) == 0
    # the reply stopped before it said anything is no turn: counted, not read
    assert sum((Counter(c["events_skipped"]) for c in counts), Counter()) == Counter({"empty_message": 1})
    with psycopg.connect(database_url) as conn:
        per_session = dict(conn.execute(
            "SELECT session_id, count(*) FROM messages GROUP BY 1").fetchall())
        roles = conn.execute("SELECT role, count(*) FROM messages GROUP BY 1 ORDER BY 1").fetchall()
        forks = conn.execute("SELECT session_id, parent_session_id, fork_seq FROM session_forks").fetchall()
        quarantined = conn.execute("SELECT count(*) FROM quarantine").fetchone()[0]
        users = {row[0] for row in conn.execute("SELECT DISTINCT user_id FROM messages")}
        first = conn.execute("SELECT content, metadata FROM messages WHERE session_id = %s AND seq = 1",
                             (MIGRATION,)).fetchone()
        thoughts = conn.execute("SELECT content, metadata->'thinking' FROM messages "
                                "WHERE metadata ? 'thinking' ORDER BY ts").fetchall()
        search = conn.execute("SELECT tool_name, tool_args, content FROM messages WHERE session_id = %s AND seq = 4",
                              (MIGRATION,)).fetchone()
        sources = {row[0] for row in conn.execute("SELECT DISTINCT source_file FROM messages")}
    assert per_session == {MIGRATION: 8, ROLLBACK: 2, CUTOVER: 9, SLOW: 6}
    assert roles == [("assistant", 12), ("user", 13)]
    assert forks == [(ROLLBACK, MIGRATION, 4)]
    assert quarantined == 0 and users == {"marta"} and sources == {"conversations.json"}
    # the attachment's text is what the user sent; the thinking stays out of the content
    content, metadata = first
    assert "[attachment orders-db-inventory.txt]\n" in content and "postgis             2.5.5" in content
    assert metadata["title"] == "Orders database: PostgreSQL 12 to 16"
    assert len(thoughts) == 3 and not any(thought[0][:40] in text for text, thought in thoughts)
    name, args, said = search
    assert name == "web_search" and args == {"query": "PostGIS 2.5 to 3 upgrade postgis_raster"}
    assert "\n\n[web_search result] Since 3.0, raster support" in said

"""A Claude Code project folder as Claude Code keeps it (a session log, its subagents' logs
under `<session>/subagents/`, and the same session exported as `{"loglines": [...]}`),
through the whole pipeline: every turn arrives, subagents are sessions of their own, side
events are counted as skipped, and a subagent's brief never becomes the user's memory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import psycopg

from assets.definitions import all_assets
from memory_pipelines.config import PACKAGE_DIR
from tests.helpers import ENTRY, materialization_metadata, materialize_partitions

FORMATS = PACKAGE_DIR / "sample_data" / "formats"
MAIN = "7c1e5a20-3b4d-4e8f-9a61-2d0c8b7f5e13"
EXPORTED = "e2b9d6f4-0c1a-4b7e-8d3f-5a6c7b8e9f01"
AGENTS = ("5d1f2a9", "8c4e0b7")
# words of the subagents' briefs ("Do not modify any files and do NOT push anything", "Never
# run it against production"): what the user must not be said to have asked for
BRIEF_WORDS = ("push", "modify any files", "production")


def test_a_claude_code_project_arrives_whole_and_a_subagent_brief_is_not_the_users_memory(database_url, tmp_path):
    folder = tmp_path / "projects"
    for kind in ("claude_code", "claude_code_export"):
        shutil.copytree(FORMATS / kind, folder / kind)
    [result] = materialize_partitions(all_assets, ["2026-11-03"], database_url, folder, source_user="noor")
    counts = materialization_metadata(result, "transcripts")
    # each log's summary, snapshot and system notice is skipped by its kind, not quarantined
    assert counts["events_skipped"] == {"summary": 2, "file-history-snapshot": 2, "system": 2}
    assert counts["quarantined"] == 0 and counts["read"] == counts["stored"] == 13 + 2 + 6 + 6 + 13 + 2
    with psycopg.connect(database_url) as conn:
        sessions = dict(conn.execute("SELECT session_id, count(*) FROM messages GROUP BY 1").fetchall())
        forks = conn.execute("SELECT session_id, parent_session_id, fork_seq FROM session_forks "
                             "ORDER BY 1").fetchall()
        empty = conn.execute("SELECT count(*) FROM messages WHERE role = 'assistant' AND btrim(content) = ''"
                             ).fetchone()[0]
        refused = conn.execute("SELECT count(*) FROM quarantine").fetchone()[0]
        links = conn.execute("SELECT DISTINCT session_id, metadata -> 'sidechain_of' ->> 'session_id', "
                             "metadata -> 'sidechain_of' ->> 'agent_id' FROM messages "
                             "WHERE metadata ? 'sidechain_of' ORDER BY 1").fetchall()
        launched = conn.execute("SELECT metadata ->> 'launched_agent', seq FROM messages WHERE session_id = %s "
                                "AND metadata ? 'launched_agent' ORDER BY seq", (MAIN,)).fetchall()
        briefs = conn.execute("SELECT metadata ->> 'speaker' FROM messages WHERE session_id LIKE '%%:agent-%%' "
                              "AND role = 'user'").fetchall()
        notice = conn.execute("SELECT metadata ->> 'speaker', metadata ->> 'notice' FROM messages "
                              "WHERE session_id = %s AND role = 'user' AND content LIKE '[Request interrupted%%'",
                              (MAIN,)).fetchall()
        binding = conn.execute(
            "SELECT kind, content FROM knowledge_entries WHERE user_id = 'noor' AND kind IN ('instruction', 'user')"
        ).fetchall()
        decisions = conn.execute("SELECT count(*) FROM knowledge_entries WHERE user_id = 'noor'").fetchone()[0]
    # the main line, the rewound prompt's fork (from seq 5, the diagnosis), two subagents; the
    # export is the same session under another id
    sidechains = {f"{MAIN}:agent-{a}" for a in AGENTS}
    assert sessions == {MAIN: 13, **dict.fromkeys(sidechains, 6), EXPORTED: 13,
                        **{s: 2 for s, _, _ in forks}}
    assert [(parent, seq) for _, parent, seq in forks] == [(EXPORTED, 5), (MAIN, 5)] or \
        sorted((parent, seq) for _, parent, seq in forks) == [(MAIN, 5), (EXPORTED, 5)]
    assert empty == 0 and refused == 0
    assert links == [(s, MAIN, s.rsplit("-", 1)[1]) for s in sorted(sidechains)]
    assert launched == [(AGENTS[0], 3), (AGENTS[1], 4)]  # the Task results that name the subagents
    assert briefs == [("agent",), ("agent",)]
    assert notice == [("system", "interrupted")]
    # `sessions` shows each subagent under the session that launched it, at the turn that called it
    listed = subprocess.run([str(ENTRY), "sessions", "--user", "noor"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "MEMORY_DATABASE_URL": database_url})
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert "2 subagents' sessions" in lines[0]
    under = lines.index(next(line for line in lines if line.lstrip().startswith(MAIN + " ")))
    assert {line.split()[1] for line in lines[under + 1:under + 4] if "subagent launched at turn 2" in line} \
        == sidechains
    # the distillation ran (something was learned), yet nothing binding the user came from a brief
    assert decisions > 0
    assert not [c for _, c in binding if any(w in c.lower() for w in BRIEF_WORDS)], binding
    # a session's search holds its subagents' turns (found first by the user's search), never
    # another session's: the copy in the export is not served for the main session
    env = {**os.environ, "MEMORY_DATABASE_URL": database_url}
    for scope, served in ((None, set(sessions)), (MAIN, sidechains | {MAIN})):
        found = subprocess.run([str(ENTRY), "search", "lookup_currency invoices", "--user", "noor", "--json",
                                *(["--session", scope] if scope else [])],
                               capture_output=True, text=True, timeout=120, env=env)
        assert found.returncode == 0, found.stderr
        sessions_hit = {h["session_id"] for h in json.loads(found.stdout)["hits"] if h["source_type"] == "raw"}
        assert sessions_hit and sessions_hit <= served, (scope, sessions_hit)
        assert sessions_hit & sidechains

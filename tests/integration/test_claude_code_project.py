"""A generated Claude Code project folder of about 50 MB (tests/claude_code_project.py: a
long session with parallel tool calls, large tool results, a compaction, three rewinds,
interruptions, side events, and 50 Task calls each with its subagent's log) through the
pipeline's ingestion and turn index with the real embedded PostgreSQL: nothing is refused,
every turn is stored where the manifest says, and every turn is found by its own words.

Searching each of the ~2,000 phrases would take long, so the search covers every phrase of
the subagents' sessions and of the forks (their copied turns included), and a fixed sample
of 250 phrases of the main session; the rest are checked in the stored rows (each turn's
phrase is in the content or tool arguments of the message at its session and seq)."""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict

import psycopg
import pytest

from assets.ingestion import transcripts
from assets.memory import memory_turns
from memory_pipelines.db.vectors import register_vector_types
from memory_pipelines.embed import EmbedConfig, build_embedder
from memory_pipelines.search import UnifiedMemorySearch
from tests.claude_code_project import DAY, PHRASE_WORDS, PROJECT_DIR, USER, write_project
from tests.helpers import materialization_metadata, materialize_partitions

pytestmark = pytest.mark.slow

MAIN_SAMPLE = 250
SEARCH_HITS = 5  # passages a search serves (the default)


def test_a_50_mb_claude_code_project_is_stored_whole_and_every_turn_is_found_by_its_words(database_url, tmp_path):
    folder = tmp_path / "projects"
    manifest = write_project(folder / PROJECT_DIR, subagents=50, target_bytes=50_000_000)
    on_disk = sum(f.stat().st_size for f in folder.rglob("*.jsonl"))
    assert on_disk == manifest.total_bytes >= 45_000_000
    assert len(manifest.agent_ids) == 50 and len(manifest.forks) == 3

    started = time.monotonic()
    [result] = materialize_partitions([transcripts, memory_turns], [DAY], database_url, folder, source_user=USER)
    ingested = time.monotonic() - started
    counts = materialization_metadata(result, "transcripts")
    assert counts["quarantined"] == 0, counts
    assert counts["events_skipped"] == manifest.skipped
    assert counts["stored"] == counts["read"] == len(manifest.turns)

    expected = {(t.session_id, t.seq): t for t in manifest.turns}
    with psycopg.connect(database_url) as conn:
        refused = conn.execute("SELECT source_file, source_line, reason, left(detail, 300) FROM quarantine "
                               "ORDER BY 1, 2").fetchall()
        stored = {(s, q): (role, content, tool_args) for s, q, role, content, tool_args in conn.execute(
            "SELECT session_id, seq, role, content, tool_args FROM messages WHERE user_id = %s", (USER,))}
        total = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        forks = {s: (p, n) for s, p, n in conn.execute(
            "SELECT session_id, parent_session_id, fork_seq FROM session_forks")}
        links = dict(conn.execute(
            "SELECT session_id, min(metadata -> 'sidechain_of' ->> 'agent_id') FROM messages "
            "WHERE metadata ? 'sidechain_of' GROUP BY 1"))
        # the Task results that name their subagents, on the main line and its forks
        launched = {row[0] for row in conn.execute(
            "SELECT metadata ->> 'launched_agent' FROM messages WHERE (session_id = %s OR session_id LIKE %s) "
            "AND metadata ? 'launched_agent'", (manifest.session_id, manifest.session_id + "~%"))}
        # the phrase words are distinct lexemes (no two stem alike) and none is a stop word
        lexemes = [row[0] for row in conn.execute(
            "SELECT strip(to_tsvector('english', w))::text FROM unnest(%s::text[]) AS w", (list(PHRASE_WORDS),))]
    # no subagent turn clashes with another session's (its events carry the parent's sessionId)
    assert [r for r in refused if r[2] == "conflicting_duplicate"] == []
    assert refused == []
    assert total == len(stored) == len(expected)
    assert "''" not in lexemes and len(set(lexemes)) == len(PHRASE_WORDS)

    sessions = defaultdict(int)
    for session, _ in stored:
        sessions[session] += 1
    assert dict(sessions) == manifest.turns_per_session()
    empty = [key for key, (role, content, _) in stored.items() if role == "assistant" and not content.strip()]
    assert empty == []
    misplaced = []  # turns whose stored role or words are not the manifest's
    for key, t in expected.items():
        role, content, tool_args = stored.get(key, (None, "", None))
        if role != t.role or (t.phrase and t.phrase not in (content + json.dumps(tool_args or {})).lower()):
            misplaced.append((key, t.role, t.phrase, role, content[:160]))
    assert misplaced == [], f"{len(misplaced)} turns not where the manifest says, e.g. {misplaced[:3]}"
    # subagents are sessions of their own, linked to the session that launched them; the forks
    # hang off the main session
    assert links == {f"{manifest.session_id}:agent-{a}": a for a in manifest.agent_ids}
    assert launched == set(manifest.agent_ids)
    assert forks == manifest.forks

    subagent_or_fork = [t for t in manifest.turns if t.phrase and t.session_id != manifest.session_id]
    main = [t for t in manifest.turns if t.phrase and t.session_id == manifest.session_id]
    wanted = subagent_or_fork + random.Random(0).sample(main, MAIN_SAMPLE)
    by_phrase = defaultdict(list)
    for t in wanted:
        by_phrase[t.phrase].append(t)
    started = time.monotonic()
    missed = []
    with psycopg.connect(database_url) as conn:
        register_vector_types(conn)
        search = UnifiedMemorySearch(conn, build_embedder(EmbedConfig()))
        for phrase, turns in by_phrase.items():
            served = search.serve(phrase, "raw", SEARCH_HITS, USER, budget_chars=None, include_forks=True)
            found = {(h.session_id, turn.seq) for h in served.hits for turn in h.turns}
            missed += [(t.session_id, t.seq, t.role, phrase) for t in turns if (t.session_id, t.seq) not in found]
        searched = time.monotonic() - started
        why = _why_missed(conn, search, missed[:5]) if missed else []
        conn.rollback()
    assert missed == [], f"{len(missed)} of {len(wanted)} turns not found by their phrase, e.g. {why}"
    print(f"\n{on_disk:,} bytes, {len(manifest.turns)} turns in {len(sessions)} sessions: ingested and indexed in "
          f"{ingested:.0f} s; {len(by_phrase)} phrases ({len(wanted)} turns) searched in {searched:.0f} s")


def _why_missed(conn: psycopg.Connection, search: UnifiedMemorySearch, missed: list[tuple]) -> list[dict]:
    """What the index holds of turns a search missed, and what the search served instead."""
    out = []
    for session, seq, role, phrase in missed:
        row = conn.execute(
            "SELECT role, body_length, left(body, 160), tsv @@ plainto_tsquery('english', %s), "
            "(SELECT count(*) FROM memory_turns t WHERE t.tsv @@ plainto_tsquery('english', %s)) "
            "FROM memory_turns WHERE session_id = %s AND seq = %s", (phrase, phrase, session, seq)).fetchone()
        served = search.serve(phrase, "raw", SEARCH_HITS, USER, budget_chars=None, include_forks=True)
        out.append({"turn": (session, seq, role, phrase), "indexed (role, length, body, matches, turns matching)": row,
                    "served": [(h.session_id, h.best_seq, round(h.score, 4), h.terms) for h in served.hits]})
    return out

"""A batch of knowledge entries, or of facts, written at once ends exactly as the same rows
written one by one, in order: the same rows (versions, merged families) and the same
first-observation order of ids, whatever the repeats of a key in the batch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from psycopg.types.json import Jsonb

from memory_pipelines.db import facts_chunks as facts_chunks_db
from memory_pipelines.db import entries as entries_db
from memory_pipelines.db.connection import get_pool
from memory_pipelines.db.rows import load_rows
from memory_pipelines.core.fact_extraction import FactCandidate, canonical_key
from memory_pipelines.core.knowledge_entries import EntryCandidate, entry_key, importance

T0 = datetime(2026, 10, 1, 9, tzinfo=UTC)
ENTRY_COLUMNS = ("entry_key, user_id, kind, title, content, tags, confidence, importance, has_pii, pii_kinds, "
                 "valid_from, valid_until, version, created_at, updated_at, session_id, seq_start, seq_end")


def _entry(user: str, title: str, content: str, hours: int, *, tags=("infra",), pii=()) -> EntryCandidate:
    return EntryCandidate(
        entry_key("fact", title, "entity", user), "fact", title, content, tuple(tags), 0.8, importance("fact", 0.8),
        "entity", user, user, bool(pii), tuple(pii), "not_set", T0 + timedelta(hours=hours), None, hours, hours)


def _batch() -> list[tuple[EntryCandidate, dict]]:
    """Keys seen up to three times, out of time order, with new content, new tags and PII on
    later sightings, interleaved with other users' keys."""
    observed = [
        _entry("ann", "database", "Postgres 16", 5),
        _entry("bob", "editor", "vim", 1),
        _entry("ann", "database", "Postgres 17", 9, tags=("infra", "db")),
        _entry("ann", "deploy target", "k8s", 2),
        _entry("ann", "database", "Postgres 15", 3, pii=("email",)),  # older: content stays, PII is kept
        _entry("bob", "editor", "vim", 1),  # the same observation again
        _entry("cat", "shell", "zsh", 4),
        _entry("bob", "editor", "helix", 7),
        _entry("bob", "editor", "vim", 0),  # a content seen before, observed earlier: its version's first sighting
    ]
    return [(e, {"session_id": f"s-{e.user_id}-{e.seq_start}", "partition_key": "2026-10-01", "run_id": "r",
                 "model": "rules", "prompt_version": "p1"}) for e in observed]


def _tables(url: str) -> tuple[list, list]:
    with psycopg.connect(url) as conn:
        entries = conn.execute(f"SELECT {ENTRY_COLUMNS} FROM knowledge_entries ORDER BY id").fetchall()
        versions = conn.execute("SELECT entry_key, content_hash, title, content, tags, observed_at, session_id "
                                "FROM knowledge_entry_versions ORDER BY entry_key, content_hash").fetchall()
    return entries, versions


def test_a_batch_written_at_once_equals_the_entries_written_one_by_one(make_database):
    at_once, one_by_one = make_database(), make_database()
    batch = _batch()
    with get_pool(at_once).connection() as conn, conn.transaction():
        written_at_once = entries_db.forge_knowledge(conn, batch)
    written_one_by_one = 0
    for item in batch:
        with get_pool(one_by_one).connection() as conn, conn.transaction():
            written_one_by_one += entries_db.forge_knowledge(conn, [item])

    entries, versions = _tables(at_once)
    assert (entries, versions) == _tables(one_by_one)
    assert written_at_once == written_one_by_one
    # what the event-time rule gives: the newest content, every distinct content a version,
    # PII of any sighting kept, ids in the order keys were first seen
    database = {row[0]: row for row in entries}[entry_key("fact", "database", "entity", "ann")]
    assert database[4] == "Postgres 17" and database[12] == 3 and database[8] and database[9] == ["email"]
    assert [row[3] for row in entries] == ["database", "editor", "deploy target", "shell"]
    assert {row[3]: row[4] for row in entries}["editor"] == "helix"
    assert len(versions) == 7  # database 3, editor 2, deploy target 1, shell 1
    assert {row[3]: row[6] for row in versions}["vim"] == "s-bob-0"  # its earliest sighting, the last in the batch


FACT_COLUMNS = ("user_id, category, key, canonical_key, value, source, confidence, last_verified_at, "
                "session_id, seq_start, seq_end, expires_at, embedding IS NULL, "
                "(SELECT m.key FROM memory_facts m WHERE m.id = memory_facts.merged_into)")


def _fact(key: str, value: str, hours: int, *, source: str = "conversation") -> FactCandidate:
    return FactCandidate("preference", key, canonical_key(key), value, source, 70, None,
                         T0 + timedelta(hours=hours), hours, hours)


def test_facts_written_at_once_equal_the_facts_written_one_by_one(make_database):
    """Repeats of one key out of time order, an equal re-observation, spellings of one key
    (a family: the most recently seen is visible), two users."""
    at_once, one_by_one = make_database(), make_database()
    observed = [("ann", _fact("editor", "vim", 5)), ("bob", _fact("editor", "emacs", 1)),
                ("ann", _fact("editor", "helix", 9)), ("ann", _fact("preferred_language", "Python", 2)),
                ("ann", _fact("editor", "nano", 3)), ("ann", _fact("language", "Rust", 8)),
                ("ann", _fact("editor", "helix", 9)), ("bob", _fact("favorite_language", "Go", 4))]
    batch = [(user, fact, {"session_id": f"s-{user}-{fact.seq_start}", "partition_key": "2026-10-01",
                           "run_id": "r", "model": "rules", "prompt_version": "p1"}) for user, fact in observed]
    with get_pool(at_once).connection() as conn, conn.transaction():
        facts_chunks_db.upsert_facts(conn, batch)
    for item in batch:
        with get_pool(one_by_one).connection() as conn, conn.transaction():
            facts_chunks_db.upsert_facts(conn, [item])

    def facts(url: str) -> list[tuple]:
        with psycopg.connect(url) as conn:
            return conn.execute(f"SELECT {FACT_COLUMNS} FROM memory_facts ORDER BY id").fetchall()

    rows = facts(at_once)
    assert rows == facts(one_by_one)
    by_key = {(row[0], row[2]): row for row in rows}
    assert by_key["ann", "editor"][4] == "helix"  # the newest value, whatever the order it came in
    assert by_key["ann", "preferred_language"][13] == "language"  # hidden behind the newer spelling
    assert by_key["ann", "language"][13] is None and by_key["bob", "favorite_language"][13] is None
    assert [(row[0], row[2]) for row in rows] == [("ann", "editor"), ("bob", "editor"), ("ann", "preferred_language"),
                                                  ("ann", "language"), ("bob", "favorite_language")]


def test_a_load_sends_each_value_as_its_columns_type(make_database):
    """Binary COPY: text, integers, times, JSON and arrays (quotes, commas, braces, the word
    NULL, an empty one, a null) arrive as they were sent. Integers load as bigint, so a value
    beyond a target's integer column arrives whole (binary int4 would wrap it) for the
    statement that writes the target to refuse; beyond bigint, the load refuses it."""
    spans = [{"session_id": "s-1", "first_seq": 1, "last_seq": 9, "note": "naïve “quoted” 🚀"}]
    keys = ['say "hi"', "a,b", "{braces}", "NULL", "back\\slash", "tab\there"]
    rows = [("ann", "session", "s-1", "day:2026-10-01", 1, None, 2**31, T0, T0 + timedelta(hours=1), Jsonb(spans),
             keys, "line one\nline two", "h1", "rules", "src"),
            ("bob", "session", "s-2", "leaf:1", 0, "day:2026-10-01", 0, T0, T0, Jsonb([]), [], None, "h2", None, "")]
    with get_pool(make_database()).connection() as conn, conn.transaction():
        load_rows(conn, "create_tree_load", "tree_load", rows)
        stored = conn.execute("SELECT * FROM tree_load ORDER BY user_id").fetchall()
        assert stored == [(*row[:9], row[9].obj, *row[10:]) for row in rows]
        with pytest.raises(OverflowError), conn.transaction():
            load_rows(conn, "create_tree_load", "tree_load", [(*rows[0][:6], 2**63, *rows[0][7:])])

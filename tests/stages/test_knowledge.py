"""Stage `knowledge_entries` (+ `entity_graph`) run directly: the entries and triples each
session-day's distillation calls wrote, PII sanitized and flagged, one source row per
session-day; a session-day whose chunks did not change is not forged again."""

from __future__ import annotations

import json

from memory_pipelines.stages import knowledge
from tests.stages.chain import SAMPLE_DAYS, rows, run_stage, run_upstream, scalar, table_contents

DAYS = ["2026-10-01", "2026-10-02"]
ENTRIES = ("SELECT kind, title, content, has_pii, pii_kinds, partition_key, version FROM knowledge_entries "
           "ORDER BY partition_key, title")


def test_entries_and_a_relation_per_day_pii_redacted_and_unchanged_days_left_alone(pool, database_url, tmp_path):
    records = [(1, "user", "I work at Orchid Labs now and my preferred editor is Helix.", "2026-10-01T10:00:00Z"),
               (2, "assistant", "Noted.", "2026-10-01T10:01:00Z"),
               (3, "user", "My email is ann@example.com, I live in Lisbon.", "2026-10-02T09:00:00Z"),
               (4, "assistant", "Got it.", "2026-10-02T09:01:00Z")]
    (tmp_path / "ann.jsonl").write_text("".join(json.dumps(
        {"session_id": "s1", "user_id": "ann", "seq": seq, "role": role, "content": content, "ts": ts}) + "\n"
        for seq, role, content, ts in records), encoding="utf-8")
    run_upstream(pool, "knowledge_entries", DAYS, source=tmp_path)
    report = run_stage(pool, "knowledge_entries", DAYS)
    counts = report.counts
    assert (counts.entries_seen, counts.entry_writes, counts.entries_dropped, counts.entries_with_pii) == (4, 4, 0, 1)
    assert (counts.relations, counts.session_days_unchanged) == (1, 0)
    assert report.users == {"ann"}
    assert rows(database_url, ENTRIES) == [
        ("user", "employer", "employer: Orchid Labs", False, [], "2026-10-01", 1),
        ("user", "preferred editor", "preferred editor: Helix", False, [], "2026-10-01", 1),
        ("user", "email", "email: [REDACTED:email]", True, ["email"], "2026-10-02", 1),
        ("user", "location", "location: Lisbon", False, [], "2026-10-02", 1)]
    assert scalar(database_url, "SELECT count(*) FROM knowledge_entries WHERE content LIKE '%%ann@example.com%%'") == 0
    assert rows(database_url, "SELECT user_id, subject, relation, object, valid_until FROM entity_graph") == [
        ("ann", "ann", "works_at", "Orchid Labs", None)]
    assert rows(database_url, "SELECT session_id, partition_key, entries FROM knowledge_sources ORDER BY 2") == [
        ("s1", "2026-10-01", 2), ("s1", "2026-10-02", 2)]

    before = table_contents(database_url)
    again = run_stage(pool, "knowledge_entries", DAYS, run_id="again").counts
    assert (again.entries_seen, again.entry_writes, again.relations, again.session_days_unchanged) == (0, 0, 0, 2)
    assert table_contents(database_url) == before

    # other settings shape other entries: both session-days are forged again
    other = knowledge.Settings(sanitize_pii=True, ttl_seconds=3600, consent_basis="not_set")
    changed = run_stage(pool, "knowledge_entries", DAYS, run_id="ttl", settings=other).counts
    assert (changed.entries_seen, changed.session_days_unchanged) == (4, 0)
    assert scalar(database_url, "SELECT count(*) FROM knowledge_sources WHERE run_id = 'ttl'") == 2


def test_the_samples_entries_are_stored_as_counted(pool, database_url):
    run_upstream(pool, "knowledge_entries", SAMPLE_DAYS)
    report = run_stage(pool, "knowledge_entries", SAMPLE_DAYS)
    counts = report.counts
    assert counts.entries_seen == scalar(database_url, "SELECT sum(entries) FROM knowledge_sources") > 0
    # every entry seen is an insert or an update (the sample re-observes keys on later days)
    assert counts.entry_writes == counts.entries_seen
    assert scalar(database_url, "SELECT count(*) FROM knowledge_entries") == scalar(
        database_url, "SELECT count(DISTINCT entry_key) FROM knowledge_entry_versions") <= counts.entry_writes
    assert counts.entries_with_pii == scalar(database_url, "SELECT count(*) FROM knowledge_entries WHERE has_pii")
    assert counts.relations == scalar(database_url, "SELECT count(*) FROM entity_graph") > 0
    # a source row per non-temp session-day with distilled chunks
    session_days = scalar(database_url, """
        SELECT count(DISTINCT (session_id, partition_key)) FROM session_summary_versions WHERE kind = 'chunk'""")
    assert scalar(database_url, "SELECT count(*) FROM knowledge_sources") == session_days > 0
    assert report.users == {r[0] for r in rows(database_url, "SELECT DISTINCT user_id FROM knowledge_entries")}

    before = table_contents(database_url)
    again = run_stage(pool, "knowledge_entries", SAMPLE_DAYS, run_id="again").counts
    assert (again.entries_seen, again.entry_writes, again.relations) == (0, 0, 0)
    assert again.session_days_unchanged == session_days
    assert table_contents(database_url) == before

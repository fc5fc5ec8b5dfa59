"""Stage `memory_facts` run directly: the facts of sessions gone stale, as their summaries'
distillation calls wrote them, each session marked extracted once, each touched user's
memory_summary written once; a session whose summary is behind waits, with its reason."""

from __future__ import annotations

from datetime import datetime, timedelta

from memory_pipelines.db import facts_chunks as facts_chunks_db
from tests.stages.chain import SAMPLE_DAYS, rows, run_stage, run_upstream, scalar, table_contents, write_session

DAYS = ["2026-10-01", "2026-10-02"]
FACTS = "SELECT user_id, category, key, value, session_id FROM memory_facts WHERE merged_into IS NULL ORDER BY key"


def test_a_stale_session_is_extracted_once_and_one_still_active_on_the_day_it_goes_stale(
        pool, database_url, tmp_path):
    write_session(tmp_path, "s1", "ann", [("user", "I prefer neovim as my editor"), ("assistant", "ok")])
    # 23:45 and 23:46: still active when the first day ends (stale after 30 minutes)
    write_session(tmp_path, "s2", "ann", [("user", "I work at Orchid Labs now."), ("assistant", "Noted.")],
                  start="23:45")
    run_stage(pool, "transcripts", DAYS, source=tmp_path)
    run_stage(pool, "conversation_segments", DAYS)
    # no summary yet: nothing is extracted, and each session says why it waits
    early = run_stage(pool, "memory_facts", DAYS[0], run_id="early")
    assert (early.counts.sessions_extracted, early.counts.sessions_failed, early.counts.facts_accepted) == (0, 1, 0)
    [waits] = early.failures
    assert waits.session_id == "s1" and "its summary reaches seq none, not its last reply (seq 2)" in waits.reason
    assert scalar(database_url, "SELECT count(*) FROM memory_facts") == 0
    assert scalar(database_url, "SELECT count(*) FROM session_memory_state") == 0

    run_stage(pool, "session_summaries", DAYS)
    first = run_stage(pool, "memory_facts", DAYS[0])
    counts = first.counts
    assert (counts.sessions_extracted, counts.sessions_failed, counts.facts_accepted, counts.facts_rejected) == (
        1, 0, 1, 0)
    assert (counts.users_touched, counts.memory_summaries_written) == (1, 1) and first.failures == []
    assert rows(database_url, FACTS) == [("ann", "preferences", "editor", "neovim", "s1")]
    assert rows(database_url, "SELECT session_id, facts_accepted, facts_rejected, partition_key "
                              "FROM session_memory_state") == [("s1", 1, 0, "2026-10-01")]
    assert rows(database_url, "SELECT user_id, fact_count FROM memory_summary") == [("ann", 1)]
    assert len(first.calls) == 1 and rows(database_url, "SELECT purpose FROM llm_calls WHERE asset = 'memory_facts'") \
        == [("summarize_facts",)]

    before = table_contents(database_url)
    again = run_stage(pool, "memory_facts", DAYS[0], run_id="again")
    assert (again.counts.sessions_extracted, again.counts.facts_accepted, again.counts.memory_summaries_written) == (
        0, 0, 0)
    assert again.calls == [] and table_contents(database_url) == before

    second = run_stage(pool, "memory_facts", DAYS[1], run_id="day2").counts
    assert (second.sessions_extracted, second.facts_accepted, second.memory_summaries_written) == (1, 1, 1)
    assert rows(database_url, FACTS) == [("ann", "preferences", "editor", "neovim", "s1"),
                                         ("ann", "work", "employer", "Orchid Labs", "s2")]
    assert rows(database_url, "SELECT session_id, partition_key FROM session_memory_state ORDER BY 1") == [
        ("s1", "2026-10-01"), ("s2", "2026-10-02")]
    assert rows(database_url, "SELECT fact_count FROM memory_summary") == [(2,)]


def test_the_samples_facts_are_stored_as_counted(pool, database_url):
    run_upstream(pool, "memory_facts", SAMPLE_DAYS)
    report = run_stage(pool, "memory_facts", SAMPLE_DAYS)
    counts = report.counts
    assert report.failures == [] and counts.sessions_failed == 0
    # every non-temp session is stale by the window's end: each extracted once
    assert counts.sessions_extracted == scalar(database_url, "SELECT count(*) FROM session_memory_state") == scalar(
        database_url, "SELECT count(*) FROM sessions WHERE session_id NOT LIKE 'temp-%%'") > 0
    assert counts.facts_accepted == scalar(database_url, "SELECT sum(facts_accepted) FROM session_memory_state") > 0
    assert counts.facts_rejected == scalar(database_url, "SELECT sum(facts_rejected) FROM session_memory_state") \
        == scalar(database_url, "SELECT count(*) FROM memory_fact_rejections")
    users = {r[0] for r in rows(database_url, "SELECT DISTINCT user_id FROM memory_facts")}
    assert counts.users_touched == len(report.users) == len(users) > 1 and report.users == users
    assert counts.memory_summaries_written == len(report.calls) == scalar(
        database_url, "SELECT count(*) FROM memory_summary") == len(users)
    # the summaries count the visible facts they were written from
    assert scalar(database_url, """
        SELECT count(*) FROM memory_summary s WHERE fact_count <> (
            SELECT count(*) FROM memory_facts f WHERE f.user_id = s.user_id AND f.merged_into IS NULL)""") == 0

    before = table_contents(database_url)
    again = run_stage(pool, "memory_facts", SAMPLE_DAYS, run_id="again").counts
    assert (again.sessions_extracted, again.facts_accepted, again.users_touched, again.memory_summaries_written) == (
        0, 0, 0, 0)
    assert table_contents(database_url) == before


def test_a_day_after_one_taken_whole_looks_only_for_sessions_gone_stale_since(pool, tmp_path):
    """What lets a long range skip re-reading every session each day: with fresh_since, only
    sessions with a message between it and stale_before; without, every session due."""
    write_session(tmp_path, "s1", "ann", [("user", "I prefer neovim as my editor"), ("assistant", "ok")])
    write_session(tmp_path, "s2", "bob", [("user", "I work at Orchid Labs now."), ("assistant", "Noted.")],
                  day=DAYS[1])
    run_stage(pool, "transcripts", DAYS, source=tmp_path)
    end = datetime.fromisoformat(f"{DAYS[1]}T00:00:00+00:00") + timedelta(days=1)
    stale = timedelta(minutes=30)
    with pool.connection() as conn:
        every = facts_chunks_db.sessions_due_for_extraction(conn, end, end - stale)
        since_day_one = facts_chunks_db.sessions_due_for_extraction(conn, end, end - stale,
                                                                    fresh_since=end - timedelta(days=1) - stale)
    assert [s.session_id for s in every] == ["s1", "s2"]
    assert [(s.session_id, s.user_id, s.last_seq) for s in since_day_one] == [("s2", "bob", 2)]

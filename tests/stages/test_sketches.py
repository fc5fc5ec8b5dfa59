"""Stage `sketches` run directly: the scratchpad tool's writes of the window's days, one row
per (section, key) and scope, the newest write winning; reads are skipped and counted."""

from __future__ import annotations

from tests.stages.chain import SAMPLE_DAYS, rows, run_stage, run_upstream, scalar, table_contents, write_session

SKETCHES = ("SELECT user_id, scope, session_id, scope_key, section, key, value, source_seq, partition_key "
            "FROM sketches ORDER BY scope, session_id, section, key")


def scratchpad(call_id: str, **args) -> list[tuple]:
    return [("assistant", "", {"tool_name": "scratchpad", "tool_args": args, "tool_call_id": call_id}),
            ("tool", "ok", {"tool_name": "scratchpad", "tool_call_id": call_id})]


def test_the_newest_write_wins_per_scope_and_reads_are_skipped(pool, database_url, tmp_path):
    write_session(tmp_path, "s1", "ann", [
        ("user", "Let's set up the project."),
        *scratchpad("c1", action="set", section="plan", key="next_step", value="write tests", scope="session"),
        *scratchpad("c2", action="set", section="conventions", key="style", value="black", scope="user"),
        *scratchpad("c3", action="get", section="plan", key="next_step"),
        *scratchpad("c4", action="set", section="plan", key="next_step", value="ship it", scope="session"),
    ])
    write_session(tmp_path, "s2", "ann", [
        ("user", "Another session"),
        *scratchpad("d1", action="set", section="plan", key="next_step", value="other", scope="session"),
        *scratchpad("d2", action="update", section="conventions", key="style", value="ruff format", scope="user"),
    ], start="12:00")
    write_session(tmp_path, "s3", "ann", [
        ("user", "Next day"), *scratchpad("e1", action="write", key="todo", value="release notes")], day="2026-10-02")
    run_upstream(pool, "sketches", ["2026-10-01", "2026-10-02"], source=tmp_path)
    first = run_stage(pool, "sketches", "2026-10-01").counts
    assert (first.sketch_writes, first.scratchpad_reads_skipped) == (5, 1)
    assert rows(database_url, SKETCHES) == [
        ("ann", "session", "s1", "s1", "plan", "next_step", "ship it", 8, "2026-10-01"),
        ("ann", "session", "s2", "s2", "plan", "next_step", "other", 2, "2026-10-01"),
        # a user's sketch is shared by their sessions: the later session's write wins
        ("ann", "user", "s2", "", "conventions", "style", "ruff format", 4, "2026-10-01")]

    before = table_contents(database_url)
    again = run_stage(pool, "sketches", "2026-10-01", run_id="again").counts
    assert (again.sketch_writes, again.scratchpad_reads_skipped) == (5, 1)  # upserted again, to the same rows
    assert table_contents(database_url) == before

    second = run_stage(pool, "sketches", "2026-10-02", run_id="day2").counts
    assert (second.sketch_writes, second.scratchpad_reads_skipped) == (1, 0)
    assert scalar(database_url, "SELECT count(*) FROM sketches") == 4
    assert rows(database_url, "SELECT scope, section, key, value FROM sketches WHERE session_id = 's3'") == [
        ("session", "notes", "todo", "release notes")]


def test_the_samples_sketches_hold_each_keys_newest_write(pool, database_url):
    run_upstream(pool, "sketches", SAMPLE_DAYS)
    counts = run_stage(pool, "sketches", SAMPLE_DAYS).counts
    # every scratchpad call of a session that is no fork is a write or a skipped read
    calls = scalar(database_url, """
        SELECT count(*) FROM messages m WHERE role = 'assistant' AND tool_name = 'scratchpad'
          AND NOT EXISTS (SELECT 1 FROM session_forks f WHERE f.session_id = m.session_id)""")
    assert counts.sketch_writes + counts.scratchpad_reads_skipped == calls
    assert counts.sketch_writes > 0 and counts.scratchpad_reads_skipped > 0
    stored = scalar(database_url, "SELECT count(*) FROM sketches")
    assert 0 < stored <= counts.sketch_writes
    # each row is the value of the write it names, and no later write of its key and scope follows
    assert scalar(database_url, """
        SELECT count(*) FROM sketches s JOIN messages m ON m.session_id = s.session_id AND m.seq = s.source_seq
        WHERE m.tool_args ->> 'value' = s.value AND m.tool_args ->> 'key' = s.key""") == stored
    assert scalar(database_url, """
        SELECT count(*) FROM sketches s JOIN messages w ON w.user_id = s.user_id AND w.tool_name = 'scratchpad'
         AND w.role = 'assistant' AND w.tool_args ->> 'key' = s.key
         AND coalesce(w.tool_args ->> 'section', 'notes') = s.section
         AND coalesce(w.tool_args ->> 'action', 'set') IN ('set', 'update', 'write')
         AND (CASE WHEN w.tool_args ->> 'scope' = 'user' THEN 'user' ELSE 'session' END) = s.scope
         AND (s.scope = 'user' OR w.session_id = s.session_id)
        WHERE w.ts > (SELECT ts FROM messages m WHERE m.session_id = s.session_id AND m.seq = s.source_seq)""") == 0

    before = table_contents(database_url)
    again = run_stage(pool, "sketches", SAMPLE_DAYS, run_id="again").counts
    assert (again.sketch_writes, again.scratchpad_reads_skipped) == (counts.sketch_writes,
                                                                     counts.scratchpad_reads_skipped)
    assert table_contents(database_url) == before

"""Stage `conversation_segments` run directly, judged by the rules back end: each
session-day's segments stored with their verdicts as counted, and a session-day whose
messages did not change is not judged again."""

from __future__ import annotations

from tests.stages.chain import SAMPLE_DAYS, rows, run_stage, run_upstream, scalar, table_contents, write_session

SEGMENT_ROWS = "SELECT segment_id, start_seq, end_seq, dropped, noise_reason FROM conversation_segments ORDER BY 1"


def tool_turns(call_id: str, tool: str, args: dict, result: str) -> list[tuple]:
    return [("assistant", "", {"tool_name": tool, "tool_args": args, "tool_call_id": call_id}),
            ("tool", result, {"tool_name": tool, "tool_call_id": call_id})]


def test_greetings_and_thanks_are_dropped_and_an_unchanged_day_is_not_judged_again(pool, database_url, tmp_path):
    chat = [("user", "hi"), ("assistant", "Hello!"),
            ("user", "How do I set tabs to 4 spaces in vim?"), ("assistant", "Use set tabstop=4 shiftwidth=4."),
            ("user", "thanks"), ("assistant", "You're welcome.")]
    write_session(tmp_path, "s1", "ann", chat)
    write_session(tmp_path, "s2", "ann", [("user", "Run the tests please."),
                                          *tool_turns("c1", "shell", {"cmd": "pytest"}, "5 passed"),
                                          ("assistant", "All five tests pass.")], start="12:00")
    run_upstream(pool, "conversation_segments", "2026-10-01", source=tmp_path)
    report = run_stage(pool, "conversation_segments", "2026-10-01")
    counts = report.counts
    assert (counts.sessions, counts.segments_judged, counts.segments_dropped, counts.segments_unchanged) == (2, 4, 2, 0)
    assert counts.segments_evidently_kept == 1  # s2's successful tool result: kept by rule
    assert dict(counts.dropped_by_reason) == {"greeting": 1, "thanks": 1}
    assert counts.judging_failed == 0 and report.failures == []
    assert rows(database_url, SEGMENT_ROWS) == [
        ("s1:1", 1, 2, True, "greeting"), ("s1:3", 3, 4, False, None), ("s1:5", 5, 6, True, "thanks"),
        ("s2:1", 1, 4, False, None)]
    # both sessions of the day shared one judging call, recorded for the asset
    assert len(report.calls) == 1 and counts.judge_calls_shared == 1
    assert rows(database_url, "SELECT asset, purpose, status, partition_key FROM llm_calls") == [
        ("conversation_segments", "judge_segments", "ok", "2026-10-01")]

    before = table_contents(database_url)
    again = run_stage(pool, "conversation_segments", "2026-10-01", run_id="again")
    assert (again.counts.segments_judged, again.counts.segments_unchanged, again.counts.sessions) == (0, 4, 2)
    assert again.calls == []
    assert table_contents(database_url) == before

    # s1 goes on: only its day is judged again, with the new segment
    write_session(tmp_path, "s1", "ann", [*chat, ("user", "And for python files only?"),
                                          ("assistant", "Put it in ftplugin/python.vim.")])
    run_stage(pool, "transcripts", "2026-10-01", source=tmp_path, run_id="more")
    more = run_stage(pool, "conversation_segments", "2026-10-01", run_id="more").counts
    assert (more.segments_judged, more.segments_unchanged, more.segments_dropped) == (4, 1, 2)
    assert scalar(database_url, "SELECT count(*) FROM conversation_segments") == 5
    assert rows(database_url, "SELECT DISTINCT run_id FROM conversation_segments WHERE session_id = 's1'") == [
        ("more",)]
    assert rows(database_url, "SELECT run_id FROM conversation_segments WHERE session_id = 's2'") == [("stage-test",)]


def test_the_samples_segments_are_stored_as_counted(pool, database_url):
    run_upstream(pool, "conversation_segments", SAMPLE_DAYS)
    report = run_stage(pool, "conversation_segments", SAMPLE_DAYS)
    counts = report.counts
    # every non-temp session-day with messages
    assert counts.sessions == scalar(database_url, """
        SELECT count(DISTINCT (session_id, (ts AT TIME ZONE 'UTC')::date)) FROM messages
        WHERE session_id NOT LIKE 'temp-%%'""") > 0
    assert counts.segments_judged == scalar(database_url, "SELECT count(*) FROM conversation_segments") > 0
    assert counts.segments_dropped == scalar(database_url, "SELECT count(*) FROM conversation_segments WHERE dropped")
    assert 0 < counts.segments_dropped < counts.segments_judged
    assert sum(counts.dropped_by_reason.values()) == counts.segments_dropped
    assert dict(counts.dropped_by_reason) == dict(rows(
        database_url, "SELECT noise_reason, count(*) FROM conversation_segments WHERE dropped GROUP BY 1"))
    assert counts.judging_failed == scalar(
        database_url, "SELECT count(*) FROM conversation_segments WHERE judge_status = 'failed'") == 0
    # no temp- session is judged; the segments cover each judged message once
    assert scalar(database_url, "SELECT count(*) FROM conversation_segments WHERE session_id LIKE 'temp-%%'") == 0
    assert scalar(database_url, "SELECT count(*) FROM conversation_segments WHERE start_seq > end_seq") == 0
    assert len(report.calls) == scalar(
        database_url, "SELECT count(*) FROM llm_calls WHERE asset = 'conversation_segments'") > 0

    before = table_contents(database_url)
    again = run_stage(pool, "conversation_segments", SAMPLE_DAYS, run_id="again").counts
    assert (again.segments_judged, again.segments_unchanged, again.segments_dropped) == (
        0, counts.segments_judged, 0)
    assert table_contents(database_url) == before

"""Stage `memory_decay` run directly: each day judged as of the newest message seen by its
end (conversation time); what it archives moves to memory_archive as counted, nothing
stored by the same run is taken, and judging the same moment again archives nothing."""

from __future__ import annotations

from memory_pipelines.config import DecaySettings
from memory_pipelines.db.connection import get_pool
from tests.stages.chain import SAMPLE_DAYS, rows, run_stage, run_upstream, scalar, table_contents, write_session

EAGER = DecaySettings(min_age_days=1)  # the two weeks of the sample are old enough then
# what decay judges: every knowledge entry and visible fact
JUDGED = """SELECT (SELECT count(*) FROM knowledge_entries)
                 + (SELECT count(*) FROM memory_facts WHERE merged_into IS NULL)"""


def newest_message(url: str) -> str:
    return scalar(url, "SELECT max(ts) FROM messages").isoformat()


def test_by_default_the_samples_two_weeks_are_too_young_to_decay(pool, database_url):
    run_upstream(pool, "memory_decay", SAMPLE_DAYS)
    counts = run_stage(pool, "memory_decay", SAMPLE_DAYS, run_id="decay").counts
    assert counts.as_of == newest_message(database_url)
    assert counts.archived == 0 and counts.archived_by_reason == {}
    assert set(counts.kept_by_reason) == {"knowledge_entries:too_young", "memory_facts:facts_not_decayed"}
    assert scalar(database_url, "SELECT count(*) FROM memory_archive") == 0
    # the last day judged every entry and visible fact
    assert counts.score_distribution["count"] == scalar(database_url, JUDGED)


def test_what_decayed_is_archived_as_counted_and_a_second_run_archives_nothing(pool, database_url):
    run_upstream(pool, "memory_decay", SAMPLE_DAYS)
    entries = scalar(database_url, "SELECT count(*) FROM knowledge_entries")
    report = run_stage(pool, "memory_decay", SAMPLE_DAYS, run_id="decay", settings=EAGER)
    counts = report.counts
    assert counts.as_of == newest_message(database_url)
    assert 0 < counts.archived == sum(counts.archived_by_reason.values()) == scalar(
        database_url, "SELECT count(*) FROM memory_archive")
    assert dict(counts.archived_by_reason) == {f"{t}:{r}": n for t, r, n in rows(
        database_url, "SELECT source_table, reason, count(*) FROM memory_archive GROUP BY 1, 2")}
    archived_entries = counts.archived_by_reason["knowledge_entries:decayed"]
    assert archived_entries > 0
    assert scalar(database_url, "SELECT count(*) FROM knowledge_entries") == entries - archived_entries
    # moved, not copied: no archived row is left in its table
    assert scalar(database_url, """
        SELECT count(*) FROM memory_archive a JOIN knowledge_entries e ON e.id = a.source_id
        WHERE a.source_table = 'knowledge_entries'""") == 0
    assert scalar(database_url, "SELECT count(*) FROM memory_archive WHERE run_id <> 'decay'") == 0
    # the last day judged every entry and visible fact: what is left, and what it archived
    assert counts.score_distribution["count"] == scalar(database_url, JUDGED) + scalar(database_url, """
        SELECT count(*) FROM memory_archive WHERE source_table IN ('knowledge_entries', 'memory_facts')
          AND partition_key = (SELECT max(partition_key) FROM memory_archive)""")

    before = table_contents(database_url)
    again = run_stage(pool, "memory_decay", SAMPLE_DAYS, run_id="again", settings=EAGER).counts
    assert (again.archived, again.as_of) == (0, counts.as_of) and again.archived_by_reason == {}
    assert table_contents(database_url) == before


def test_a_range_archives_what_judging_everyone_each_day_archives(make_database):
    """One run over the range re-judges on its middle days only the users who wrote since:
    less work, and the same archive as runs of one day each, which judge everyone every day."""
    pools = [get_pool(make_database()) for _ in range(2)]
    for pool in pools:
        run_upstream(pool, "memory_decay", SAMPLE_DAYS)
    ranged = run_stage(pools[0], "memory_decay", SAMPLE_DAYS, run_id="range", settings=EAGER).counts
    daily = [run_stage(pools[1], "memory_decay", day, run_id=f"day-{day}", settings=EAGER).counts
             for day in SAMPLE_DAYS]
    assert ranged.archived == sum(d.archived for d in daily) > 0
    assert sum(ranged.kept_by_reason.values()) < sum(sum(d.kept_by_reason.values()) for d in daily)
    tables = ["memory_archive", "knowledge_entries", "memory_facts", "error_memory"]
    urls = [pool.conninfo for pool in pools]
    assert table_contents(urls[0], tables) == table_contents(urls[1], tables)


def test_nothing_the_same_run_stored_is_taken(pool, database_url):
    run_upstream(pool, "memory_decay", SAMPLE_DAYS, run_id="one-run")
    counts = run_stage(pool, "memory_decay", SAMPLE_DAYS, run_id="one-run", settings=EAGER).counts
    assert counts.archived == 0
    assert set(counts.kept_by_reason) == {"knowledge_entries:stored_this_run", "memory_facts:stored_this_run"}
    assert scalar(database_url, "SELECT count(*) FROM memory_archive") == 0


def test_an_error_memory_past_its_ttl_goes_as_of_the_users_next_message(pool, database_url, tmp_path):
    def call(call_id, result, failed=False):
        return [("assistant", "", {"tool_name": "shell", "tool_args": {"cmd": "pytest"}, "tool_call_id": call_id}),
                ("tool", result, {"tool_name": "shell", "tool_call_id": call_id,
                                  **({"metadata": {"is_error": True}} if failed else {})})]

    write_session(tmp_path, "s1", "ann", [("user", "Run the tests."), *call("c1", "Error: boom", True),
                                          *call("c2", "5 passed")])
    write_session(tmp_path, "s2", "ann", [("user", "hello again, what's new?"), ("assistant", "Not much.")],
                  day="2026-12-31")
    run_upstream(pool, "memory_decay", ["2026-10-01", "2026-12-31"], source=tmp_path)
    assert scalar(database_url, "SELECT count(*) FROM error_memory") == 1
    # a day with no message is judged as of the last message before it (conversation time, not
    # the calendar): the error, seen on 2026-10-01 at 10:04 and kept 90 days, stays
    quiet = run_stage(pool, "memory_decay", "2026-12-30", run_id="quiet").counts
    assert (quiet.as_of, quiet.archived) == ("2026-10-01T10:04:00+00:00", 0)
    late = run_stage(pool, "memory_decay", "2026-12-31", run_id="late").counts
    assert late.as_of == "2026-12-31T10:01:00+00:00"
    assert (late.archived, dict(late.archived_by_reason)) == (1, {"error_memory:ttl": 1})
    assert scalar(database_url, "SELECT count(*) FROM error_memory") == 0
    assert rows(database_url, "SELECT source_table, reason, user_id, session_id, partition_key "
                              "FROM memory_archive") == [("error_memory", "ttl", "ann", "s1", "2026-12-31")]
    assert run_stage(pool, "memory_decay", "2026-12-31", run_id="again").counts.archived == 0

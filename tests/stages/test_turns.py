"""Stage `memory_turns` run directly: every user, assistant and tool message of the window's
sessions indexed in its session's language, per-user statistics refreshed; indexing again
writes nothing, and any order of days leaves the rows a range leaves."""

from __future__ import annotations

from memory_pipelines.db.connection import get_pool
from tests.stages.chain import SAMPLE_DAYS, rows, run_stage, run_upstream, scalar, table_contents, write_session

TURNS = "SELECT session_id, seq, role, language, pos FROM memory_turns ORDER BY 1, 2"
GERMAN = [("user", "Wie kann ich in Python eine Datei zeilenweise lesen und die Zeilen zählen?"),
          ("assistant", "Öffne die Datei mit open() und iteriere über die Zeilen, dann zählst du sie mit "
                        "einem Zähler."),
          ("user", "Und wie überspringe ich dabei die leeren Zeilen in der Datei?"),
          ("assistant", "Prüfe mit line.strip(), ob die Zeile leer ist, und überspringe sie dann.")]
ENGLISH = [("system", "You are a helpful assistant."),
           ("user", "How do I read a file line by line in Python and count the lines?"),
           ("assistant", "Open it with open() and iterate over the lines, counting them as you go.")]


def test_each_session_in_its_language_and_a_second_run_writes_nothing(pool, database_url, tmp_path):
    write_session(tmp_path, "de", "jonas", GERMAN)
    write_session(tmp_path, "en", "jonas", ENGLISH, start="12:00")
    run_upstream(pool, "memory_turns", "2026-10-01", source=tmp_path)
    report = run_stage(pool, "memory_turns", "2026-10-01")
    counts = report.counts
    assert (counts.sessions_indexed, counts.turns_written, counts.turns_removed) == (2, 6, 0)
    assert dict(counts.languages) == {"german": 1, "english": 1}
    assert report.sessions == {"de", "en"} and report.users == {"jonas"}
    # the system prompt is no turn
    assert rows(database_url, TURNS) == [
        ("de", 1, "user", "german", 0), ("de", 2, "assistant", "german", 1), ("de", 3, "user", "german", 2),
        ("de", 4, "assistant", "german", 3), ("en", 2, "user", "english", 0), ("en", 3, "assistant", "english", 1)]
    assert rows(database_url, "SELECT user_id, language, turns FROM memory_turn_stats ORDER BY 2") == [
        ("jonas", "english", 2), ("jonas", "german", 4)]

    before = table_contents(database_url)
    again = run_stage(pool, "memory_turns", "2026-10-01", run_id="again").counts
    assert (again.sessions_indexed, again.turns_written, again.turns_removed) == (2, 0, 0)
    assert table_contents(database_url) == before
    # a day without messages, chunks or summaries of a session indexes none
    assert run_stage(pool, "memory_turns", "2026-10-05", run_id="empty").counts.sessions_indexed == 0


def test_the_samples_turns_are_stored_as_counted(pool, database_url):
    run_upstream(pool, "memory_turns", SAMPLE_DAYS)
    report = run_stage(pool, "memory_turns", SAMPLE_DAYS)
    counts = report.counts
    assert counts.turns_written == scalar(database_url, "SELECT count(*) FROM memory_turns") == scalar(
        database_url, "SELECT count(*) FROM messages WHERE role <> 'system'")
    assert counts.turns_removed == 0
    sessions = {r[0] for r in rows(database_url, "SELECT session_id FROM sessions")}
    assert counts.sessions_indexed == len(sessions) and report.sessions == sessions
    assert sum(counts.languages.values()) == scalar(database_url, "SELECT count(DISTINCT session_id) FROM memory_turns")
    assert dict(counts.languages) == dict(rows(database_url, """
        SELECT language, count(*) FROM (SELECT DISTINCT session_id, language FROM memory_turns) x GROUP BY 1"""))
    assert len(counts.languages) > 1
    assert scalar(database_url, "SELECT sum(turns) FROM memory_turn_stats") == counts.turns_written

    before = table_contents(database_url)
    again = run_stage(pool, "memory_turns", SAMPLE_DAYS, run_id="again").counts
    assert (again.turns_written, again.turns_removed, again.sessions_indexed) == (0, 0, len(sessions))
    assert table_contents(database_url) == before


def test_days_in_reverse_order_leave_the_rows_of_the_range(pool, database_url, make_database):
    run_upstream(pool, "memory_turns", SAMPLE_DAYS)
    written = sum(run_stage(pool, "memory_turns", key).counts.turns_written for key in reversed(SAMPLE_DAYS))
    assert written >= scalar(database_url, "SELECT count(*) FROM memory_turns") > 0
    ranged = make_database()
    ranged_pool = get_pool(ranged)
    run_upstream(ranged_pool, "memory_turns", SAMPLE_DAYS)
    run_stage(ranged_pool, "memory_turns", SAMPLE_DAYS)
    tables = ["memory_turns", "memory_turn_stats"]
    assert table_contents(database_url, tables) == table_contents(ranged, tables)


def test_a_turn_whose_message_is_gone_is_removed_and_no_other(pool, database_url, tmp_path):
    write_session(tmp_path, "de", "jonas", GERMAN)
    write_session(tmp_path, "en", "jonas", ENGLISH, start="12:00")
    run_upstream(pool, "memory_turns", "2026-10-01", source=tmp_path)
    assert run_stage(pool, "memory_turns", "2026-10-01").counts.turns_written == 6
    with get_pool(database_url).connection() as conn:
        conn.execute("DELETE FROM messages WHERE session_id = 'de' AND seq IN (3, 4)")
    again = run_stage(pool, "memory_turns", "2026-10-01", run_id="again").counts
    # written again: the turn whose window held the gone ones
    assert (again.sessions_indexed, again.turns_written, again.turns_removed) == (2, 1, 2)
    assert rows(database_url, TURNS) == [
        ("de", 1, "user", "german", 0), ("de", 2, "assistant", "german", 1),
        ("en", 2, "user", "english", 0), ("en", 3, "assistant", "english", 1)]

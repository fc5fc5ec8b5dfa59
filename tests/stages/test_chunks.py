"""Stage `memory_chunks` run directly: what left a session's context window (all of it once
the session is stale) packed into chunks of at most 4,000 characters, each message in one
chunk; packing the same days again writes nothing."""

from __future__ import annotations

from tests.stages.chain import SAMPLE_DAYS, rows, run_stage, run_upstream, scalar, table_contents, write_session

DAYS = ["2026-10-01", "2026-10-02"]
CHUNKS = "SELECT start_seq, end_seq, message_count, partition_key FROM memory_chunks ORDER BY start_seq"


def test_the_context_window_stays_until_the_session_goes_stale(pool, database_url, tmp_path):
    # 20 messages of ~1,450 characters, one a minute from 23:31 to 23:50: two fit a chunk;
    # the session is still active when the first day ends, stale on the second
    padding = "x" * 1400
    turns = []
    for i in range(10):
        turns += [("user", f"Question {i}: how do I set option {i} of the build? {padding}"),
                  ("assistant", f"Set build.option{i} = true in the config file. {padding}")]
    write_session(tmp_path, "late", "ann", turns, start="23:31")
    run_upstream(pool, "memory_chunks", DAYS, source=tmp_path)
    first = run_stage(pool, "memory_chunks", DAYS[0])
    # the last 16 stay in the context: seqs 1-4 left it, two closed chunks
    assert (first.counts.sessions_considered, first.counts.chunks_written, first.counts.messages_chunked) == (1, 2, 4)
    assert first.sessions == {"late"}
    assert rows(database_url, CHUNKS) == [(1, 2, 2, "2026-10-01"), (3, 4, 2, "2026-10-01")]
    # stale on the second day: the rest, the open last chunk too
    second = run_stage(pool, "memory_chunks", DAYS[1], run_id="day2").counts
    assert (second.chunks_written, second.messages_chunked) == (8, 16)
    assert rows(database_url, CHUNKS) == [(1, 2, 2, "2026-10-01"), (3, 4, 2, "2026-10-01")] + [
        (seq, seq + 1, 2, "2026-10-02") for seq in range(5, 21, 2)]
    assert scalar(database_url, "SELECT max(length(content)) FROM memory_chunks") <= 4000

    before = table_contents(database_url)
    again = run_stage(pool, "memory_chunks", DAYS, run_id="again").counts
    assert (again.chunks_written, again.messages_chunked) == (0, 0)
    assert table_contents(database_url) == before


def test_the_samples_chunks_are_stored_as_counted(pool, database_url):
    run_upstream(pool, "memory_chunks", SAMPLE_DAYS)
    report = run_stage(pool, "memory_chunks", SAMPLE_DAYS)
    counts = report.counts
    assert counts.chunks_written == scalar(database_url, "SELECT count(*) FROM memory_chunks") > 0
    assert counts.messages_chunked == scalar(database_url, "SELECT sum(message_count) FROM memory_chunks")
    assert report.sessions == {r[0] for r in rows(database_url, "SELECT DISTINCT session_id FROM memory_chunks")}
    # every session is stale by the window's end: each message of a non-temp session (but a
    # system prompt) is in exactly one chunk
    assert scalar(database_url, """
        SELECT count(*) FROM messages m
        WHERE m.role <> 'system' AND m.session_id NOT LIKE 'temp-%%'
          AND (SELECT count(*) FROM memory_chunks c WHERE c.session_id = m.session_id
               AND m.seq BETWEEN c.start_seq AND c.end_seq) <> 1""") == 0
    # a message longer than a chunk is a chunk of its own
    assert scalar(database_url, "SELECT max(length(content)) FROM memory_chunks WHERE message_count > 1") <= 4000
    assert scalar(database_url, "SELECT count(*) FROM memory_chunks WHERE cardinality(breadcrumbs) > 0") > 0

    before = table_contents(database_url)
    again = run_stage(pool, "memory_chunks", SAMPLE_DAYS, run_id="again").counts
    assert (again.chunks_written, again.messages_chunked) == (0, 0)
    assert table_contents(database_url) == before

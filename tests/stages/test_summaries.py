"""Stage `session_summaries` run directly with the rules back end: a version per summarized
chunk, the cursor on the last message folded, every version kept; a run over days already
built reuses them, and a late message rebuilds forward from its day."""

from __future__ import annotations

import json

from tests.stages.chain import SAMPLE_DAYS, rows, run_stage, run_upstream, scalar, table_contents

DAYS = ["2026-10-01", "2026-10-02"]
VERSIONS = ("SELECT version, partition_key, kind, first_seq, last_seq, cursor_seq, run_id "
            "FROM session_summary_versions ORDER BY version")


def write(path, *records) -> None:
    path.write_text("".join(json.dumps({"session_id": "s1", "user_id": "ann", "seq": seq, "role": role,
                                        "content": content, "ts": ts}) + "\n" for seq, role, content, ts in records),
                    encoding="utf-8")


def test_a_summary_per_day_then_reused_then_rebuilt_from_a_late_days_change(pool, database_url, tmp_path):
    write(tmp_path / "a.jsonl",
          (1, "user", "We deploy the ledger service with Helm.", "2026-10-01T09:00:00Z"),
          (2, "assistant", "OK, Helm it is.", "2026-10-01T09:01:00Z"),
          (5, "user", "Switch the ledger-api to port 9090.", "2026-10-02T09:00:00Z"),
          (6, "assistant", "Done.", "2026-10-02T09:01:00Z"))
    run_upstream(pool, "session_summaries", DAYS, source=tmp_path)
    first = run_stage(pool, "session_summaries", DAYS[0])
    assert (first.counts.sessions, first.counts.versions_built, first.counts.versions_reused) == (1, 1, 0)
    assert dict(first.counts.versions_by_kind) == {"chunk": 1} and first.failures == []
    assert rows(database_url, "SELECT version, cursor_seq, partition_key FROM session_summaries") == [
        (1, 2, "2026-10-01")]
    second = run_stage(pool, "session_summaries", DAYS[1], run_id="day2")
    assert (second.counts.versions_built, second.counts.versions_reused) == (1, 0)
    assert rows(database_url, "SELECT version, cursor_seq, partition_key FROM session_summaries") == [
        (2, 6, "2026-10-02")]
    assert rows(database_url, VERSIONS) == [(1, "2026-10-01", "chunk", 1, 2, 2, "stage-test"),
                                            (2, "2026-10-02", "chunk", 5, 6, 6, "day2")]
    # each built chunk version has its distillation call recorded
    assert scalar(database_url, "SELECT count(*) FROM llm_calls WHERE asset = 'session_summaries' "
                                "AND purpose = 'distill' AND status = 'ok'") == 2

    before = table_contents(database_url)
    again = run_stage(pool, "session_summaries", DAYS, run_id="again").counts
    assert (again.sessions, again.versions_built, again.versions_reused, again.rebuilt_from_changed_day) == (1, 0, 2, 0)
    assert table_contents(database_url) == before

    # two messages of the first day arrive late: both days are folded again from it
    write(tmp_path / "b.jsonl", (3, "user", "Also, I prefer vim as my editor.", "2026-10-01T09:02:00Z"),
          (4, "assistant", "Noted.", "2026-10-01T09:03:00Z"))
    assert run_stage(pool, "transcripts", DAYS, source=tmp_path, run_id="late").counts.stored == 2
    late = run_stage(pool, "session_summaries", DAYS, run_id="late").counts
    assert (late.versions_built, late.versions_reused, late.rebuilt_from_changed_day) == (2, 0, 1)
    assert rows(database_url, VERSIONS) == [(1, "2026-10-01", "chunk", 1, 4, 4, "late"),
                                            (2, "2026-10-02", "chunk", 5, 6, 6, "late")]
    assert rows(database_url, "SELECT version, cursor_seq FROM session_summaries") == [(2, 6)]


def test_the_samples_summaries_are_stored_as_counted(pool, database_url):
    run_upstream(pool, "session_summaries", SAMPLE_DAYS)
    report = run_stage(pool, "session_summaries", SAMPLE_DAYS)
    counts = report.counts
    non_temp = {r[0] for r in rows(database_url, "SELECT session_id FROM sessions WHERE session_id NOT LIKE 'temp-%%'")}
    assert counts.sessions == len(non_temp) > 0 and report.failures == []
    assert counts.versions_built == scalar(database_url, "SELECT count(*) FROM session_summary_versions") > 0
    assert sum(counts.versions_by_kind.values()) == counts.versions_built
    assert dict(counts.versions_by_kind) == dict(rows(
        database_url, "SELECT kind, count(*) FROM session_summary_versions GROUP BY 1"))
    assert {r[0] for r in rows(database_url, "SELECT session_id FROM session_summaries")} == non_temp
    # each summary is its session's newest version, its cursor past every message but a
    # question at the end, left for its answer (a chunk never ends on a kept user message)
    assert scalar(database_url, """
        SELECT count(*) FROM session_summaries s
        WHERE s.version <> (SELECT max(version) FROM session_summary_versions v WHERE v.session_id = s.session_id)
        """) == 0
    waiting = rows(database_url, """
        SELECT m.role, m.seq = x.last FROM session_summaries s JOIN messages m USING (session_id)
        JOIN (SELECT session_id, max(seq) AS last FROM messages GROUP BY 1) x USING (session_id)
        WHERE m.seq > s.cursor_seq""")
    assert waiting and set(waiting) == {("user", True)}
    assert len(report.calls) == scalar(database_url, "SELECT count(*) FROM llm_calls WHERE asset = 'session_summaries'")
    assert scalar(database_url, "SELECT count(*) FROM llm_calls WHERE asset = 'session_summaries' "
                                "AND purpose = 'distill'") == counts.versions_by_kind["chunk"]

    before = table_contents(database_url)
    again = run_stage(pool, "session_summaries", SAMPLE_DAYS, run_id="again")
    assert (again.counts.versions_built, again.counts.versions_reused) == (0, counts.versions_built)
    assert again.calls == []
    assert table_contents(database_url) == before

"""Stage `error_memory` run directly: a failed tool result followed later in the session by
a successful call of the same tool is one resolved error (tool, error, fix), kept 90 days
from when it was seen; an error never fixed is none."""

from __future__ import annotations

from datetime import timedelta

from tests.stages.chain import SAMPLE_DAYS, rows, run_stage, run_upstream, scalar, table_contents, write_session


def call(call_id: str, tool: str, args: dict, result: str, failed: bool = False) -> list[tuple]:
    outcome = {"tool_name": tool, "tool_call_id": call_id, **({"metadata": {"is_error": True}} if failed else {})}
    return [("assistant", "", {"tool_name": tool, "tool_args": args, "tool_call_id": call_id}),
            ("tool", result, outcome)]


def test_a_fixed_tool_error_is_remembered_once_and_an_unfixed_one_not(pool, database_url, tmp_path):
    write_session(tmp_path, "s1", "ann", [
        ("user", "Run the tests."),
        *call("c1", "shell", {"cmd": "pytest"}, "Error: ModuleNotFoundError: No module named 'fakeredis'", True),
        *call("c2", "read_file", {"path": "missing.py"}, "Error: FileNotFoundError: missing.py", True),
        *call("c3", "shell", {"cmd": "pip install fakeredis && pytest"}, "5 passed"),
        ("assistant", "Done."),
    ])
    run_upstream(pool, "error_memory", "2026-10-01", source=tmp_path)
    report = run_stage(pool, "error_memory", "2026-10-01")
    assert report.counts.resolved_errors == 1
    [(tool, error, fix, error_seq, fix_seq, observed, expires, key)] = rows(database_url, """
        SELECT tool, error, fix, error_seq, fix_seq, observed_at, expires_at, partition_key FROM error_memory""")
    assert (tool, error, fix) == ("shell", "Error: ModuleNotFoundError: No module named 'fakeredis'",
                                  'shell({"cmd": "pip install fakeredis && pytest"})')
    assert (error_seq, fix_seq, key) == (3, 7, "2026-10-01")  # the failed result, the successful one
    assert observed.isoformat() == "2026-10-01T10:06:00+00:00" and expires - observed == timedelta(days=90)

    before = table_contents(database_url)
    again = run_stage(pool, "error_memory", "2026-10-01", run_id="again")
    assert again.counts.resolved_errors == 1  # found again, upserted onto the same row
    assert table_contents(database_url) == before
    # a day without a failed tool call finds none
    assert run_stage(pool, "error_memory", "2026-10-02", run_id="next").counts.resolved_errors == 0


def test_the_samples_resolved_errors_are_stored_as_counted(pool, database_url):
    run_upstream(pool, "error_memory", SAMPLE_DAYS)
    counts = run_stage(pool, "error_memory", SAMPLE_DAYS).counts
    assert counts.resolved_errors == scalar(database_url, "SELECT count(*) FROM error_memory") > 0
    # each names a failed result of its tool and a later successful call of it in the same session
    assert scalar(database_url, """
        SELECT count(*) FROM error_memory e
        JOIN messages f ON f.session_id = e.session_id AND f.seq = e.error_seq
        JOIN messages x ON x.session_id = e.session_id AND x.seq = e.fix_seq
        WHERE f.role = 'tool' AND (f.metadata ->> 'is_error')::boolean AND f.tool_name = e.tool
          AND x.tool_name = e.tool AND x.seq > f.seq AND e.expires_at = e.observed_at + interval '90 days'""") \
        == counts.resolved_errors
    before = table_contents(database_url)
    assert run_stage(pool, "error_memory", SAMPLE_DAYS, run_id="again").counts.resolved_errors == counts.resolved_errors
    assert table_contents(database_url) == before

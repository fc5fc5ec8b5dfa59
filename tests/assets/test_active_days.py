"""A ranged run visits only the days with work: the days with messages, and the day a session
goes stale with no message that day (its facts and chunks fall due then). A range with empty
days ends with the tables a day-by-day run builds."""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg

from assets.definitions import all_assets
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.stages.common import Window
from tests.helpers import content_fingerprints, materialize_partitions, materialize_range, pipeline_resources

DAYS = ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04", "2026-03-05"]
# s-late ends at 23:50 on the first day: 30 minutes later (the default staleness) is the
# second day, which has no message; s-next talks on the fourth day only
SESSIONS = {  # session: (user's message time, the answer's time, the user's message)
    "s-late": ("2026-03-01T23:40:00Z", "2026-03-01T23:50:00Z",
               "I work at Orchid Labs now, and my preferred editor is Helix."),
    "s-next": ("2026-03-04T09:00:00Z", "2026-03-04T09:01:00Z",
               "I live in Lisbon since March."),
}


def _write(folder) -> None:
    folder.mkdir()
    lines = []
    for session_id, (asked, answered, text) in SESSIONS.items():
        lines += [
            {"session_id": session_id, "user_id": "ana", "seq": 1, "role": "user", "content": text, "ts": asked},
            {"session_id": session_id, "user_id": "ana", "seq": 2, "role": "assistant",
             "content": "Noted, I will keep that in mind.", "ts": answered},
        ]
    (folder / "ana.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def test_the_days_with_work_are_those_with_messages_and_those_a_session_goes_stale_on(database_url, tmp_path):
    _write(tmp_path / "t")
    ranged = materialize_range(all_assets, DAYS[0], DAYS[-1], pipeline_resources(database_url, tmp_path / "t"))
    # every day is materialized; the range's counts are on its last day, the others name it
    by_day = {m.partition: m.metadata for m in ranged.asset_materializations_for_node("memory_facts")}
    assert sorted(by_day) == DAYS
    assert by_day[DAYS[-1]]["sessions_extracted"].value == 2
    assert all(by_day[d]["range_totals_on"].value == DAYS[-1] and "sessions_extracted" not in by_day[d]
               for d in DAYS[:-1])
    window = Window(tuple(DAYS), "r")
    with psycopg.connect(database_url) as conn:
        assert summaries_db.active_days(conn, window.span) == {"2026-03-01", "2026-03-04"}
        assert summaries_db.active_days(conn, window.span, timedelta(minutes=30)) == {
            "2026-03-01", "2026-03-02", "2026-03-04"}
        assert summaries_db.active_days(conn, Window(("2026-03-02",), "r").span) == frozenset()
        # s-late's facts were extracted on the day it went stale, with no message that day
        extracted = dict(conn.execute("SELECT session_id, partition_key FROM session_memory_state").fetchall())
    assert extracted == {"s-late": "2026-03-02", "s-next": "2026-03-04"}


def test_a_range_with_empty_days_builds_what_a_run_per_day_builds(make_database, tmp_path):
    _write(tmp_path / "t")
    by_day, in_range = make_database(), make_database()
    materialize_partitions(all_assets, DAYS, by_day, tmp_path / "t")
    materialize_range(all_assets, DAYS[0], DAYS[-1], pipeline_resources(in_range, tmp_path / "t"))
    built = content_fingerprints(by_day)
    assert built["memory_facts"][0] > 0 and built["memory_chunks"][0] > 0  # there is something to compare
    assert content_fingerprints(in_range) == built

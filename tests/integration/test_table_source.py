"""An agent's own message table as a transcript source: a second database on the embedded
server plays the agent's, read by the `transcripts` asset and watched by the sensor."""

from __future__ import annotations

from datetime import UTC, date, datetime

import dagster as dg
import psycopg
import pytest

from assets.ingestion import transcripts
from memory_pipelines.sources import SourceSettings, open_source
from memory_pipelines.sources.base import TranscriptSourceError
from tests.conftest import _clones
from tests.helpers import materialize_partitions, sensor_context

COLUMNS = {"session_id": "conversation_id", "user_id": "owner", "seq": "position", "role": "author",
           "content": "body", "ts": "created_at", "id": "id"}
TABLE = """
CREATE TABLE chat_messages (
    id bigserial PRIMARY KEY, conversation_id text, owner text, position int, author text,
    body text, created_at timestamptz, updated_at timestamptz NOT NULL DEFAULT now(), model text
)"""


@pytest.fixture
def agent_db(pg_admin_url):
    """A plain database of its own, as an agent framework keeps messages in."""
    yield from _clones(pg_admin_url, "template0", "agent_")


def _table(url: str, query: str) -> str:
    """The agent's URL (the embedded server's names its socket folder as ?host=) with a table."""
    return f"{url}{'&' if '?' in url else '?'}{query}"


def _insert(url: str, *rows) -> None:
    with psycopg.connect(url) as conn:
        conn.cursor().executemany(
            "INSERT INTO chat_messages (conversation_id, owner, position, author, body, created_at, model, updated_at)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)", rows)


def _ts(day: int, hour: int) -> datetime:
    return datetime(2026, 10, day, hour, tzinfo=UTC)


def _stored(url: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT session_id, seq, user_id, role, content, source_file, source_line, metadata "
                            "FROM messages ORDER BY session_id, seq").fetchall()


def test_a_source_table_is_read_by_day_and_watched_by_watermark(agent_db, database_url):
    agent = agent_db()
    with psycopg.connect(agent) as conn:
        conn.execute(TABLE)
    _insert(agent,
            ("c-1", "ann", 1, "user", "our deploys go through the blue cluster", _ts(3, 9), None, _ts(3, 9)),
            ("c-1", "ann", 2, "assistant", "noted: blue cluster for deploys", _ts(3, 9), "m-small", _ts(3, 9)),
            ("c-2", "ann", 1, "user", "rotate the staging keys on Fridays", _ts(4, 10), None, _ts(4, 10)),
            ("c-2", "ann", 2, "assistant", "Fridays it is", _ts(4, 10), "m-small", _ts(4, 10)),
            ("c-3", "ann", 1, "user", "and a third", _ts(4, 11), None, _ts(4, 11)))
    # with a password in the URL (the embedded server trusts its socket and ignores it)
    location = _table(agent.replace("postgres:@", "postgres:s3cret@", 1), "table=chat_messages&watermark=updated_at")
    assert "s3cret" in location
    settings = SourceSettings(location=location, columns=COLUMNS, batch_rows=2)
    source = open_source(settings)
    found = source.inventory()
    assert (found.first_day, found.last_day, found.records, found.days) == (date(2026, 10, 3), date(2026, 10, 4), 5, 2)
    first = source.changes({})
    assert first.days == (date(2026, 10, 3), date(2026, 10, 4))

    # only the day's rows are read: day 3 stores c-1's two turns, traced to their row ids
    [result] = materialize_partitions([transcripts], ["2026-10-03"], database_url, location,
                                      columns=COLUMNS, batch_rows=2)
    assert result.success
    # the run's metadata names the source without its password
    shown = result.asset_materializations_for_node("transcripts")[0].metadata["source"].value
    assert "s3cret" not in shown and "postgres:***@" in shown
    stored = _stored(database_url)
    assert [(s, q, u, r) for s, q, u, r, *_ in stored] == [("c-1", 1, "ann", "user"), ("c-1", 2, "ann", "assistant")]
    assert [(f, line) for *_, f, line, _m in stored] == [("chat_messages", 1), ("chat_messages", 2)]
    # columns not mapped are kept in metadata; the watermark, which moves by itself, is not
    assert stored[1][7] == {"model": "m-small"} and stored[0][7] == {"model": None}

    # nothing new: nothing to do
    assert source.changes(first.cursor).days == ()
    # a late turn for day 3 and a day-3 row edited after it was archived
    _insert(agent, ("c-1", "ann", 3, "user", "also: no deploys on Mondays", _ts(3, 12), None, _ts(5, 8)))
    with psycopg.connect(agent) as conn:
        conn.execute("UPDATE chat_messages SET body = 'deploys go through the green cluster', "
                     "updated_at = %s WHERE conversation_id = 'c-1' AND position = 1", [_ts(5, 9)])
    late = source.changes(first.cursor)
    assert late.days == (date(2026, 10, 3),) and late.changed == ("2 row(s) past watermark "
                                                                   f"{first.cursor['watermark']}",)
    [again] = materialize_partitions([transcripts], ["2026-10-03"], database_url, location, columns=COLUMNS)
    counts = again.asset_materializations_for_node("transcripts")[0].metadata
    assert (counts["stored"].value, counts["duplicate"].value, counts["quarantined"].value) == (1, 1, 1)
    # the edited row is refused as the README says: the archive keeps what was first ingested
    stored = {(s, q): content for s, q, _u, _r, content, *_ in _stored(database_url)}
    assert stored[("c-1", 1)] == "our deploys go through the blue cluster"
    assert stored[("c-1", 3)] == "also: no deploys on Mondays"
    with psycopg.connect(database_url) as conn:
        [(reason, detail)] = conn.execute("SELECT reason, detail FROM quarantine").fetchall()
    assert reason == "conflicting_duplicate" and "c-1" in detail


def test_a_source_table_names_what_to_fix(agent_db):
    agent = agent_db()
    with psycopg.connect(agent) as conn:
        conn.execute(TABLE)
    with pytest.raises(TranscriptSourceError, match="no table or view 'chats'"):
        open_source(SourceSettings(location=_table(agent, "table=chats"))).inventory()
    with pytest.raises(TranscriptSourceError, match="no column for session_id, seq, role, content, ts, user_id: "
                                                    "map them with MEMORY_SOURCE_COLUMNS=session_id=<column>"):
        open_source(SourceSettings(location=_table(agent, "table=chat_messages"))).inventory()
    wrong = {**COLUMNS, "content": "text_body"}
    with pytest.raises(TranscriptSourceError, match="maps content to 'text_body', which chat_messages lacks"):
        open_source(SourceSettings(location=_table(agent, "table=chat_messages"), columns=wrong)).inventory()
    with pytest.raises(TranscriptSourceError, match="cannot connect to the transcript database"):
        open_source(SourceSettings(location="postgresql://nobody@127.0.0.1:9/x?table=t")).inventory()
    twice = {**COLUMNS, "seq": "id"}
    with pytest.raises(TranscriptSourceError, match="maps seq and id to the one column 'id': map each canonical"):
        open_source(SourceSettings(location=_table(agent, "table=chat_messages"), columns=twice)).inventory()


def test_a_source_table_named_in_mixed_case_in_a_schema_is_found(agent_db):
    agent = agent_db()
    with psycopg.connect(agent) as conn:
        conn.execute('CREATE SCHEMA "Agent"')
        conn.execute(TABLE.replace("chat_messages", '"Agent"."ChatMessages"'))
        conn.execute('INSERT INTO "Agent"."ChatMessages" (conversation_id, owner, position, author, body, created_at) '
                     "VALUES ('c-1', 'ann', 1, 'user', 'hello', %s)", [_ts(3, 9)])
    found = open_source(SourceSettings(location=_table(agent, "table=Agent.ChatMessages"), columns=COLUMNS)).inventory()
    assert (found.records, found.first_day) == (1, date(2026, 10, 3))


def test_the_sensor_requests_the_days_of_new_rows(agent_db, monkeypatch, database_url):
    from assets.definitions import transcript_files_sensor

    agent = agent_db()
    with psycopg.connect(agent) as conn:
        conn.execute(TABLE)
    _insert(agent, ("c-1", "ann", 1, "user", "hello", _ts(3, 9), None, _ts(3, 9)))
    monkeypatch.setenv("MEMORY_TRANSCRIPTS", _table(agent, "table=chat_messages&watermark=updated_at"))
    monkeypatch.setenv("MEMORY_SOURCE_COLUMNS", ",".join(f"{k}={v}" for k, v in COLUMNS.items()))
    context = sensor_context(database_url, None)
    assert [r.partition_key for r in transcript_files_sensor(context)] == ["2026-10-03"]
    assert isinstance(transcript_files_sensor(sensor_context(database_url, context.cursor)), dg.SkipReason)
    _insert(agent, ("c-9", "ann", 1, "user", "later", _ts(6, 9), None, _ts(6, 9)))
    assert [r.partition_key for r in transcript_files_sensor(sensor_context(database_url, context.cursor))] \
        == ["2026-10-06"]


def test_a_row_without_a_time_is_quarantined_once_and_the_others_stored(agent_db, database_url):
    agent = agent_db()
    with psycopg.connect(agent) as conn:
        conn.execute(TABLE)
    _insert(agent, ("c-1", "ann", 1, "user", "timed", _ts(3, 9), None, _ts(3, 9)),
            ("c-1", "ann", 2, "user", "untimed", None, None, _ts(3, 9)),
            ("c-2", "ann", 1, "user", "timed too", _ts(4, 9), None, _ts(4, 9)))
    location = _table(agent, "table=chat_messages")
    refused_per_run = []
    for day in ("2026-10-03", "2026-10-04", "2026-10-03"):
        [result] = materialize_partitions([transcripts], [day], database_url, location, columns=COLUMNS)
        refused_per_run.append(result.asset_materializations_for_node("transcripts")[0].metadata["quarantined"].value)
    # read by the runs of the table's first day only, not by every day's
    assert refused_per_run == [1, 0, 1]
    with psycopg.connect(database_url) as conn:
        stored = conn.execute("SELECT session_id, seq FROM messages ORDER BY 1, 2").fetchall()
        refused = conn.execute("SELECT source_file, source_line, reason, detail FROM quarantine").fetchall()
    assert stored == [("c-1", 1), ("c-2", 1)]
    assert refused == [("chat_messages#no-time", 2, "missing_field", "missing required field(s): ts")]

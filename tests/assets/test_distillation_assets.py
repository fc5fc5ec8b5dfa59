"""conversation_segments and session_summaries materialized against the real database,
with the rules back end and with a real HTTP model server on 127.0.0.1."""

from __future__ import annotations

import re
import shutil
from datetime import date, timedelta

import psycopg
import pytest

from assets.distillation import conversation_segments, session_summaries
from assets.ingestion import transcripts
from assets.partitions import TRANSIENT_RETRIES
from assets.resources import ModelResource
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.core.noise_filter import MISSING_VERDICT
from tests.fakes import FakeModelServer, Fault, default_answer
from tests.helpers import (
    content_fingerprints, materialization_metadata, materialize_partitions, materialize_range, pipeline_resources,
)

PIPELINE = [transcripts, conversation_segments, session_summaries]
DAYS = [(date(2026, 10, 1) + timedelta(days=i)).isoformat() for i in range(14)]


def rows(url, statement, params=None):
    with psycopg.connect(url) as conn:
        return conn.execute(statement, params).fetchall()


def one(url, statement, params=None):
    return rows(url, statement, params)[0][0]


@pytest.fixture
def server():
    fake = FakeModelServer()
    yield fake
    fake.close()


def ollama(server, **extra) -> ModelResource:
    settings = {"model": "fake-llm", "retries": 0, "backoff_s": 0.0, "timeout_s": 5.0, **extra}
    return ModelResource(backend="ollama", base_url=server.url, **settings)


def test_offline_run_fills_segments_summaries_and_the_call_ledger(database_url):
    materialize_partitions(PIPELINE, DAYS, database_url, SAMPLE_TRANSCRIPTS)
    non_temp = one(database_url, "SELECT count(*) FROM sessions WHERE session_id NOT LIKE 'temp-%'")
    assert one(database_url, "SELECT count(*) FROM session_summaries WHERE cursor_seq IS NOT NULL "
                             "AND cursor_ts IS NOT NULL") == non_temp
    assert one(database_url, "SELECT count(*) FROM session_summaries WHERE session_id LIKE 'temp-%'") == 0
    assert one(database_url, "SELECT count(*) FROM conversation_segments WHERE session_id LIKE 'temp-%'") == 0
    dropped = dict(rows(database_url, "SELECT noise_reason, count(*) FROM conversation_segments WHERE dropped "
                                      "GROUP BY 1"))
    assert {"greeting", "thanks"} <= set(dropped) and sum(dropped.values()) >= 10
    assert one(database_url, "SELECT bool_and(confidence >= 0.7 AND is_noise) FROM conversation_segments "
                             "WHERE dropped")
    # summary shape: the five fields, decisions prefixed, the caps held
    for (summary,) in rows(database_url, "SELECT summary FROM session_summaries"):
        assert set(summary) == {"key_decisions", "past_discussions", "current_discussion", "keys", "language"}
        assert len(summary["key_decisions"]) <= 8 and len(summary["keys"]) <= 40
        assert all(d.startswith(("Do: ", "Don't: ")) for d in summary["key_decisions"])
    bob = one(database_url, "SELECT summary FROM session_summaries WHERE session_id = 's-bob-0005'")
    assert any("9090" in d for d in bob["key_decisions"])
    # every version kept with its partition; the midnight session has one per day
    assert one(database_url, "SELECT count(DISTINCT partition_key) FROM session_summary_versions "
                             "WHERE session_id = 's-dmitri-0004'") == 2
    calls = dict(rows(database_url, "SELECT purpose, count(*) FROM llm_calls WHERE backend = 'rules' GROUP BY 1"))
    assert calls["judge_segments"] > 0 and calls["distill"] == one(
        database_url, "SELECT count(*) FROM session_summary_versions WHERE kind = 'chunk'")
    # the cursor never passes a message that was not summarized or dropped
    assert one(database_url, """
        SELECT count(*) FROM session_summaries s
        WHERE s.cursor_seq > (SELECT max(seq) FROM messages m WHERE m.session_id = s.session_id)""") == 0


def test_sessions_folded_in_concurrent_batches_build_what_one_at_a_time_builds(make_database):
    one, several = make_database(), make_database()
    materialize_partitions(PIPELINE, DAYS, one, SAMPLE_TRANSCRIPTS)
    materialize_range(PIPELINE, DAYS[0], DAYS[-1], pipeline_resources(several, SAMPLE_TRANSCRIPTS,
                                                                      llm=ModelResource(concurrency=3)))
    tables = ["session_summary_versions", "session_summaries", "conversation_segments"]
    built = content_fingerprints(one, tables)
    assert built["session_summary_versions"][0] > 0
    assert content_fingerprints(several, tables) == built


def test_rerunning_changes_nothing_and_calls_no_model(database_url):
    materialize_partitions(PIPELINE, DAYS, database_url, SAMPLE_TRANSCRIPTS)
    before = content_fingerprints(database_url)
    calls = one(database_url, "SELECT count(*) FROM llm_calls")
    materialize_partitions(PIPELINE, DAYS, database_url, SAMPLE_TRANSCRIPTS)
    assert content_fingerprints(database_url) == before
    assert one(database_url, "SELECT count(*) FROM llm_calls") == calls


def test_summary_calls_go_to_the_configured_server_one_per_chunk(database_url, server, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "dmitri", folder)
    resources = pipeline_resources(database_url, folder, llm=ollama(server))
    materialize_partitions(PIPELINE, DAYS, database_url, folder, resources=resources)
    distill = server.by_purpose("distill")
    chunks = one(database_url, "SELECT count(*) FROM session_summary_versions WHERE kind = 'chunk'")
    assert len(distill) == chunks > 0
    assert one(database_url, "SELECT count(*) FROM llm_calls WHERE purpose = 'distill' AND backend = 'ollama' "
                             "AND model = 'fake-llm' AND status = 'ok' AND NOT tokens_estimated") == chunks
    # the long incident session needed more than one chunk, each within the bound
    assert one(database_url, "SELECT max(step_count) FROM session_summary_versions "
                             "WHERE session_id = 's-dmitri-0003'") >= 2
    for request in distill:
        assert len(request.user) <= 32_000
        # every message a line of its own, numbered by its seq; never ending on a user message
        lines = [re.sub(r"^\[\d+\] ", "", line) for line in request.user.splitlines() if re.match(r"\[\d+\] ", line)]
        assert not lines[-1].startswith("User:")
    # decisions stay with the rules back end unless MEMORY_DECISION_BACKEND says otherwise
    assert server.by_purpose("judge_segments") == []
    assert one(database_url, "SELECT count(*) FROM llm_calls WHERE purpose = 'judge_segments' AND backend = 'rules'") > 0


def test_a_days_sessions_share_judging_calls_and_a_left_out_session_is_judged_again(database_url, server):
    """All sessions of a day go in one judging call; a session the answer leaves out is
    kept unjudged (failed), and only it is asked about again on the next run."""
    left_out = []

    def answer(request, number):
        reply = default_answer(request, number)
        if request.purpose == "judge_segments" and not left_out and request.user.count("## conversation ") > 1:
            left_out.append(request.user.split("## conversation ", 2)[1].split()[0])
            reply["segments"] = [v for v in reply["segments"] if not v["id"].startswith(left_out[0] + ":")]
        return reply

    server.answer = answer
    resources = pipeline_resources(database_url, SAMPLE_TRANSCRIPTS, decision=ollama(server))
    materialize_partitions([transcripts, conversation_segments], DAYS, database_url, SAMPLE_TRANSCRIPTS,
                           resources=resources)
    per_day = dict(rows(database_url, "SELECT partition_key, count(DISTINCT session_id) FROM conversation_segments "
                                      "GROUP BY 1"))
    # every session-day asked about once, in far fewer calls than session-days
    assert sum(r.user.count("## conversation ") for r in server.requests) == sum(per_day.values())
    assert len(server.requests) <= len(per_day) + 2 < sum(per_day.values())
    [session] = left_out
    failed = rows(database_url, "SELECT DISTINCT session_id, judge_error FROM conversation_segments "
                                "WHERE judge_status = 'failed'")
    assert failed == [(session, MISSING_VERDICT)]
    assert one(database_url, "SELECT count(*) FROM llm_calls WHERE purpose = 'judge_segments' "
                             "AND session_id IS NULL") == sum(r.user.count("## conversation ") > 1
                                                              for r in server.requests)
    asked = len(server.requests)
    materialize_partitions([transcripts, conversation_segments], DAYS, database_url, SAMPLE_TRANSCRIPTS,
                           resources=resources)
    again = server.requests[asked:]
    assert len(again) == 1 and again[0].user.count("## conversation ") == 1 and f"conversation {session}\n" in \
        again[0].user
    assert one(database_url, "SELECT count(*) FROM conversation_segments WHERE judge_status = 'failed'") == 0


def test_a_summary_answer_that_breaks_its_schema_is_asked_again_and_counted(database_url, server, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "dmitri", folder)
    server.fail = lambda request, number: Fault(garbage=True) if request.purpose == "distill" and not any(
        r.purpose == "distill" for r in server.requests[:number - 1]) else None
    results = materialize_partitions(PIPELINE, DAYS, database_url, folder,
                                     resources=pipeline_resources(database_url, folder, llm=ollama(server)))
    retried = [materialization_metadata(r, "session_summaries")["model_calls_schema_retried"] for r in results]
    assert sum(retried) == 1
    assert rows(database_url, "SELECT purpose, status, attempts FROM llm_calls WHERE schema_retried") == [
        ("distill", "ok", 2)]
    assert one(database_url, "SELECT count(*) FROM llm_calls WHERE status <> 'ok'") == 0


@pytest.mark.parametrize("share", ["day", "user", "session"])
def test_decision_share_bounds_whose_sessions_one_judging_call_holds(database_url, server, share):
    resources = pipeline_resources(database_url, SAMPLE_TRANSCRIPTS, decision=ollama(server, share=share))
    materialize_partitions([transcripts, conversation_segments], DAYS, database_url, SAMPLE_TRANSCRIPTS,
                           resources=resources)
    owner = dict(rows(database_url, "SELECT session_id, user_id FROM sessions"))
    held = [{owner[s] for s in re.findall(r"^## conversation (\S+)$", r.user, re.MULTILINE)}
            for r in server.by_purpose("judge_segments")]
    sessions = [r.user.count("## conversation ") for r in server.by_purpose("judge_segments")]
    judged = one(database_url, "SELECT count(DISTINCT (session_id, partition_key)) FROM conversation_segments")
    assert sum(sessions) == judged > 0  # every session-day asked about once
    if share == "day":  # the sample's days hold several users: the default mixes them
        assert max(len(users) for users in held) > 1
    elif share == "user":  # one call per user-day (the pure test shows a user's sessions sharing one)
        user_days = one(database_url, "SELECT count(DISTINCT (s.user_id, c.partition_key)) FROM conversation_segments c "
                                      "JOIN sessions s USING (session_id)")
        assert all(len(users) == 1 for users in held) and len(held) == user_days
    else:
        assert set(sessions) == {1}


def fail_third_chunk(server: FakeModelServer, fault: Fault, *, every_attempt: bool):
    """The third summary call fails; with `every_attempt`, so does every later call that
    sends the same chunk (a fault that outlasts the step's retries)."""
    failing: list[str] = []

    def fail(request, number):
        if request.purpose != "distill":
            return None
        if not failing and sum(1 for r in server.requests if r.purpose == "distill") == 3:
            failing.append(request.user)
            return fault
        return fault if every_attempt and failing and request.user == failing[0] else None

    return fail


def undisturbed_fingerprints(make_database, folder) -> dict:
    clean = make_database()
    quiet = FakeModelServer()
    try:
        materialize_partitions(PIPELINE, DAYS, clean, folder, resources=pipeline_resources(
            clean, folder, llm=ollama(quiet), chunk_chars=6000))
    finally:
        quiet.close()
    return content_fingerprints(clean)


def test_a_transient_model_failure_is_retried_within_the_run(make_database, server, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "dmitri", folder)
    url = make_database()
    server.fail = fail_third_chunk(server, Fault(status=500), every_attempt=False)
    resources = pipeline_resources(url, folder, llm=ollama(server), chunk_chars=6000)
    results = materialize_partitions(PIPELINE, DAYS, url, folder, resources=resources)
    assert all(r.success for r in results)
    retried = [r for r in results if any(e.event_type_value == "STEP_RESTARTED" for e in r.all_events)]
    assert len(retried) == 1
    texts = [r.user for r in server.by_purpose("distill")]
    # the failed chunk was sent again by the retry; every other chunk exactly once
    assert len(texts) == len(set(texts)) + 1 and texts.count(texts[2]) == 2
    assert content_fingerprints(url) == undisturbed_fingerprints(make_database, folder)


@pytest.mark.parametrize("fault", [Fault(status=500), Fault(delay_s=6.0), Fault(garbage=True)],
                         ids=["5xx", "timeout", "unparsable"])
def test_a_failed_chunk_stops_the_session_and_the_next_run_resumes_without_rebilling(
        make_database, server, tmp_path, fault):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "dmitri", folder)
    # small chunks: the long session needs several calls; the third summary call fails on
    # every attempt the step's retry policy makes
    url = make_database()
    server.fail = fail_third_chunk(server, fault, every_attempt=True)
    resources = pipeline_resources(url, folder, llm=ollama(server, timeout_s=3.0), chunk_chars=6000)
    results = materialize_partitions(PIPELINE, DAYS, url, folder, resources=resources, expect_success=False)
    failed = [r for r in results if not r.success]
    assert len(failed) == 1  # only the day that held the failed chunk
    failed_day = DAYS[results.index(failed[0])]
    attempts = TRANSIENT_RETRIES.max_retries + 1
    errors = rows(url, "SELECT DISTINCT session_id, partition_key, status FROM llm_calls WHERE status <> 'ok'")
    assert one(url, "SELECT count(*) FROM llm_calls WHERE status <> 'ok'") == attempts
    [error] = errors
    assert error[1] == failed_day and error[2] == ("unparsable" if fault.garbage else "error")
    session = error[0]
    saved = rows(url, "SELECT cursor_seq FROM session_summaries WHERE session_id = %s", (session,))
    last = one(url, "SELECT max(seq) FROM messages WHERE session_id = %s", (session,))
    assert saved == [] or saved[0][0] < last  # the cursor stopped at the last good chunk
    sent_before = len(server.by_purpose("distill"))

    server.fail = lambda request, number: None
    materialize_partitions(PIPELINE, DAYS, url, folder, resources=resources)
    texts = [r.user for r in server.by_purpose("distill")]
    failed_text = texts[2]
    # nothing billed twice: every chunk sent once, except the failed one, sent once more per
    # request of a failed attempt (an answer that is not JSON is asked again once: two)
    resent = attempts * (2 if fault.garbage else 1)
    assert len(texts) == len(set(texts)) + resent and texts.count(failed_text) == resent + 1
    assert len(texts) == sent_before + one(url, "SELECT count(*) FROM session_summary_versions WHERE kind = 'chunk'") \
        - (sent_before - resent)
    assert one(url, "SELECT cursor_seq FROM session_summaries WHERE session_id = %s", (session,)) is not None
    # the recovered tables equal an undisturbed run's
    assert content_fingerprints(url) == undisturbed_fingerprints(make_database, folder)


def test_a_summary_without_cursor_only_gets_its_cursor(database_url, server, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO session_summaries (session_id, user_id, summary) VALUES "
                     "('s-bob-0001', 'bob', '{\"current_discussion\": \"imported earlier\"}')")
    resources = pipeline_resources(database_url, folder, llm=ollama(server))
    materialize_partitions(PIPELINE, DAYS, database_url, folder, resources=resources)
    assert one(database_url, "SELECT count(*) FROM llm_calls WHERE session_id = 's-bob-0001' "
                             "AND purpose = 'distill'") == 0
    assert not any("imported earlier" in r.system for r in server.requests)
    kind, cursor, summary = rows(database_url, "SELECT kind, cursor_seq, summary FROM session_summary_versions "
                                               "WHERE session_id = 's-bob-0001' ORDER BY version")[0]
    assert kind == "cursor_only" and summary["current_discussion"] == "imported earlier"
    assert cursor == one(database_url, "SELECT max(seq) FROM messages WHERE session_id = 's-bob-0001' "
                                       "AND ts < (SELECT min(ts)::date + 1 FROM messages WHERE session_id = 's-bob-0001')")


def test_a_ui_style_backfill_of_a_past_range_gives_the_in_order_tables(make_database):
    in_order = make_database()
    materialize_partitions(PIPELINE, DAYS, in_order, SAMPLE_TRANSCRIPTS)
    expected = content_fingerprints(in_order)

    rerun = make_database()
    materialize_partitions(PIPELINE, DAYS, rerun, SAMPLE_TRANSCRIPTS)
    result = materialize_range(PIPELINE, "2026-10-03", "2026-10-06", pipeline_resources(rerun, SAMPLE_TRANSCRIPTS))
    assert result.success
    assert content_fingerprints(rerun) == expected

    one_run = make_database()
    assert materialize_range(PIPELINE, DAYS[0], DAYS[-1], pipeline_resources(one_run, SAMPLE_TRANSCRIPTS)).success
    assert content_fingerprints(one_run) == expected


def test_a_late_transcript_for_an_earlier_day_rebuilds_forward_to_the_in_order_tables(make_database, tmp_path):
    in_order = make_database()
    materialize_partitions(PIPELINE, DAYS, in_order, SAMPLE_TRANSCRIPTS)
    expected = content_fingerprints(in_order)

    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS, folder)
    late = folder / "bob" / "2026-10-week2.jsonl"  # bob's week 2, with the port change
    held_back = late.read_bytes()
    late.unlink()
    url = make_database()
    materialize_partitions(PIPELINE, DAYS, url, folder)
    assert content_fingerprints(url) != expected
    late.write_bytes(held_back)
    days = sorted({r[0] for r in rows(in_order, "SELECT DISTINCT ts::date::text FROM messages WHERE source_file = %s",
                                      ("bob/2026-10-week2.jsonl",))})
    materialize_partitions(PIPELINE, days, url, folder)
    assert content_fingerprints(url) == expected


def test_a_gap_before_the_range_is_filled_from_the_state_before_it(make_database):
    """Days built with D7 never built: sessions that go on after D7 start from the state
    as of D6 and fold D7 in; sessions that live only on D7 wait for D7's own run."""
    in_order = make_database()
    materialize_partitions(PIPELINE, DAYS, in_order, SAMPLE_TRANSCRIPTS)
    gap = make_database()
    materialize_partitions([transcripts], DAYS, gap, SAMPLE_TRANSCRIPTS)
    materialize_partitions(PIPELINE, DAYS[:6] + DAYS[7:], gap, SAMPLE_TRANSCRIPTS)
    only_d7 = {r[0] for r in rows(gap, "SELECT session_id FROM sessions WHERE session_id NOT LIKE 'temp-%%' "
                                       "AND first_message_at::date = %s AND last_active::date = %s",
                                  (DAYS[6], DAYS[6]))}
    statement = "SELECT session_id, summary, cursor_seq, version FROM session_summaries ORDER BY 1"
    expected = [r for r in rows(in_order, statement) if r[0] not in only_d7]
    assert only_d7 and rows(gap, statement) == expected
    materialize_partitions(PIPELINE, [DAYS[6]], gap, SAMPLE_TRANSCRIPTS)
    assert content_fingerprints(gap) == content_fingerprints(in_order)

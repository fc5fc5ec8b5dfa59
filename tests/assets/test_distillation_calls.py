"""One distillation call per summarized chunk writes all of a chunk's memory (issue 16):
the summary, the facts, the knowledge entries and the relations, each validated on its own,
every row naming the call that wrote it. Against the instant model server over HTTP and
the real database."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from datetime import date, timedelta

import dagster as dg
import psycopg
import pytest

from assets.distillation import conversation_segments, session_summaries
from assets.ingestion import transcripts
from assets.knowledge import knowledge_entries
from assets.memory import memory_facts
from assets.resources import ModelResource
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from tests.fakes import FakeModelServer, default_answer
from tests.helpers import materialization_metadata, materialize_partitions, pipeline_resources

WRITERS = [transcripts, conversation_segments, session_summaries, memory_facts, knowledge_entries]
DAYS = [(date(2026, 10, 1) + timedelta(days=i)).isoformat() for i in range(14)]


def rows(url, statement, params=None):
    with psycopg.connect(url) as conn:
        return conn.execute(statement, params).fetchall()


@pytest.fixture
def server():
    fake = FakeModelServer()
    yield fake
    fake.close()


def knowledge_metadata(result: dg.ExecuteInProcessResult) -> dict:
    """The knowledge_entries materialization's metadata (its step writes entity_graph too)."""
    [mat] = [m for m in result.asset_materializations_for_node("knowledge_entries")
             if m.asset_key == dg.AssetKey("knowledge_entries")]
    return {k: v.value for k, v in mat.metadata.items()}


def model(server) -> ModelResource:
    return ModelResource(backend="ollama", base_url=server.url, model="fake-llm", retries=0, backoff_s=0.0)


def test_one_call_per_chunk_writes_summary_facts_and_knowledge(database_url, server, tmp_path):
    folder = tmp_path / "t"
    for user in ("bob", "dmitri"):
        shutil.copytree(SAMPLE_TRANSCRIPTS / user, folder / user)
    resources = pipeline_resources(database_url, folder, llm=model(server), decision=model(server))
    results = materialize_partitions(WRITERS, DAYS, database_url, folder, resources=resources)
    asked = Counter(r.purpose for r in server.requests)
    chunks = rows(database_url, "SELECT count(*) FROM session_summary_versions WHERE kind = 'chunk'")[0][0]
    # the chunk's distillation is its only memory-writing call: no extraction or synthesis call of
    # their own; the rest is judging (a call per day), overturn checks and the users' narratives
    assert asked["distill"] == chunks > 0
    assert set(asked) == {"judge_segments", "distill", "find_overturned", "summarize_facts"}
    assert asked["judge_segments"] <= len(DAYS) and asked["summarize_facts"] <= 2 * len(DAYS)
    for result in results:
        assert materialization_metadata(result, "memory_facts")["model_calls"] == \
            materialization_metadata(result, "memory_facts").get("memory_summaries_written", 0)
        assert "model_calls" not in knowledge_metadata(result)
    # every fact names the distillation call that wrote it, and that call's chunk holds its message
    facts = rows(database_url, """
        SELECT f.seq_start, v.first_seq, v.last_seq, c.purpose, c.status
        FROM memory_facts f
        JOIN session_summary_versions v ON v.call_id = f.call_id AND v.session_id = f.session_id
        JOIN llm_calls c ON c.call_id = f.call_id""")
    assert len(facts) == rows(database_url, "SELECT count(*) FROM memory_facts")[0][0] > 0
    assert all(first <= seq <= last and purpose == "distill" and status == "ok"
               for seq, first, last, purpose, status in facts)
    # every fact a chunk's call wrote was taken (the instant server's are all valid: a chunk's first
    # user line), and only those
    assert rows(database_url, "SELECT sum(facts_accepted), sum(facts_rejected) FROM session_memory_state")[0] == \
        (rows(database_url, "SELECT sum(jsonb_array_length(memory_items -> 'facts')) FROM session_summary_versions "
                            "WHERE kind = 'chunk'")[0][0], 0)
    # the lineage view finds each fact's call by its id
    assert rows(database_url, "SELECT count(*) FROM fact_lineage WHERE call_id IS NULL")[0][0] == 0


def test_a_partly_invalid_answer_keeps_its_valid_parts_and_rejects_the_rest_with_reasons(
        database_url, server, tmp_path):
    folder = tmp_path / "t"
    folder.mkdir()
    turns = [("user", "I work at Acme and my editor is Helix."), ("assistant", "Noted: Acme, Helix.")]
    (folder / "s1.jsonl").write_text("".join(
        json.dumps({"session_id": "s1", "user_id": "ann", "seq": seq, "role": role, "content": text,
                    "ts": f"2026-10-01T10:0{seq}:00Z"}) + "\n" for seq, (role, text) in enumerate(turns, start=1)))

    def answer(request, number):
        if request.purpose != "distill":
            return default_answer(request, number)
        return {"summary": {"key_decisions": ["Do: use Helix"], "current_discussion": "Ann's setup",
                            "keys": ["Acme", "Helix"], "language": "English"},
                "facts": [{"category": "work", "key": "employer", "value": "Acme", "source": "user_explicit",
                           "seq": 1},
                          {"category": "tools", "value": "Helix"},  # no key
                          {"category": "tools", "key": "editor", "value": "Helix", "seq": 7}],  # no such line
                "entries": [{"kind": "user", "title": "Employer", "content": "Ann works at Acme", "seq": 1},
                            {"kind": "rumour", "title": "x", "content": "y"}],  # no such kind
                "relations": "none"}  # not a list

    server.answer = answer
    resources = pipeline_resources(database_url, folder, llm=model(server))
    [result] = materialize_partitions(WRITERS, ["2026-10-01"], database_url, folder, resources=resources)
    # one call, asked once: a bad item is rejected later and costs neither the summary nor a retry
    assert [r.purpose for r in server.requests] == ["distill", "summarize_facts"]
    assert rows(database_url, "SELECT schema_retried, status FROM llm_calls WHERE purpose = 'distill'") == \
        [(False, "ok")]
    [(summary,)] = rows(database_url, "SELECT summary FROM session_summaries WHERE session_id = 's1'")
    assert summary["key_decisions"] == ["Do: use Helix"] and summary["current_discussion"] == "Ann's setup"
    assert rows(database_url, "SELECT key, value, seq_start FROM memory_facts") == [("employer", "Acme", 1)]
    reasons = sorted(r[0] for r in rows(database_url, "SELECT reason FROM memory_fact_rejections"))
    assert len(reasons) == 2 and "'key' is a required property" in reasons[0] and "seq 7" in reasons[1]
    assert rows(database_url, "SELECT facts_accepted, facts_rejected FROM session_memory_state") == [(1, 2)]
    assert rows(database_url, "SELECT kind, title, content FROM knowledge_entries") == \
        [("user", "Employer", "Ann works at Acme")]
    assert rows(database_url, "SELECT count(*) FROM entity_graph")[0][0] == 0
    knowledge = knowledge_metadata(result)
    assert (knowledge["entries_seen"], knowledge["entries_dropped"], knowledge["relations"]) == (1, 2, 0)
    # the rows name the call; its chunk keeps the answer's items as they came, for audit
    [(items,)] = rows(database_url, "SELECT memory_items FROM session_summary_versions")
    assert items["relations"] == "none" and len(items["facts"]) == 3
    assert rows(database_url, "SELECT count(DISTINCT call_id) FROM (SELECT call_id FROM memory_facts UNION ALL "
                              "SELECT call_id FROM knowledge_entries UNION ALL SELECT call_id FROM "
                              "memory_fact_rejections) x")[0][0] == 1


def test_facts_wait_for_the_summary_that_writes_them(database_url, tmp_path):
    """memory_facts run before session_summaries has summarized a stale session leaves it due,
    saying why, instead of marking it extracted with nothing."""
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "s1.jsonl").write_text("".join(
        json.dumps({"session_id": "s1", "user_id": "ann", "seq": seq, "role": role, "content": text,
                    "ts": f"2026-10-01T10:0{seq}:00Z"}) + "\n"
        for seq, (role, text) in enumerate([("user", "I live in Oslo"), ("assistant", "ok")], start=1)))
    materialize_partitions([transcripts, memory_facts], ["2026-10-01"], database_url, folder)
    assert rows(database_url, "SELECT count(*) FROM session_memory_state")[0][0] == 0
    [result] = materialize_partitions([memory_facts], ["2026-10-01"], database_url, folder)
    assert materialization_metadata(result, "memory_facts")["sessions_failed"] == 1
    materialize_partitions([conversation_segments, session_summaries, memory_facts], ["2026-10-01"], database_url,
                           folder)
    assert rows(database_url, "SELECT key, value FROM memory_facts") == [("location", "Oslo")]
    assert rows(database_url, "SELECT extracted_seq FROM session_memory_state") == [(2,)]


def test_a_segment_with_a_successful_tool_result_is_kept_without_asking_the_judge(database_url, server, tmp_path):
    def session(name: str, day: str, turns: list[dict]) -> None:
        (tmp_path / f"{name}.jsonl").write_text("".join(
            json.dumps({"session_id": name, "user_id": "ann", "seq": seq, "ts": f"{day}T10:{seq:02d}:00Z", **turn})
            + "\n" for seq, turn in enumerate(turns, start=1)))

    tool_turn = [{"role": "user", "content": "run the tests"},
                 {"role": "assistant", "content": "", "tool_name": "shell", "tool_args": {"cmd": "pytest"},
                  "tool_call_id": "c1"},
                 {"role": "tool", "content": "12 passed", "tool_name": "shell", "tool_call_id": "c1"}]
    session("mixed", "2026-10-01", [{"role": "user", "content": "hello!"}, *tool_turn,
                                    {"role": "user", "content": "thanks"}])
    session("tools", "2026-10-02", tool_turn)
    resources = pipeline_resources(database_url, tmp_path, decision=model(server))
    materialize_partitions([transcripts, conversation_segments], ["2026-10-01", "2026-10-02"], database_url,
                           tmp_path, resources=resources)
    # one judging call, for the first day, holding the greeting and the thanks but not the tool turn
    [judging] = server.by_purpose("judge_segments")
    assert "### segment mixed:1\n" in judging.user and "### segment mixed:5\n" in judging.user
    assert "mixed:2" not in judging.user and "12 passed" not in judging.user
    assert rows(database_url, "SELECT segment_id, judge_backend, confidence, dropped FROM conversation_segments "
                              "ORDER BY segment_id") == [
        ("mixed:1", "ollama", 0.9, False), ("mixed:2", "rule", 1.0, False), ("mixed:5", "ollama", 0.9, False),
        ("tools:1", "rule", 1.0, False)]
    assert rows(database_url, "SELECT count(*) FROM llm_calls WHERE purpose = 'judge_segments'")[0][0] == 1


def test_chunks_summarized_before_distillation_leave_their_session_due_until_rebuilt(database_url, tmp_path):
    """An upgraded database: a session summarized by the summary-only prompt (its versions keep
    no memory items) and not yet extracted waits, saying which day to run again, and the run
    from that day rebuilds its chunks with their facts."""
    (tmp_path / "s1.jsonl").write_text("".join(
        json.dumps({"session_id": "s1", "user_id": "ann", "seq": seq, "role": role, "content": text,
                    "ts": f"2026-10-01T10:0{seq}:00Z"}) + "\n"
        for seq, (role, text) in enumerate([("user", "I live in Oslo"), ("assistant", "ok")], start=1)))
    materialize_partitions([transcripts, conversation_segments, session_summaries], ["2026-10-01"], database_url,
                           tmp_path)
    with psycopg.connect(database_url) as conn:  # as migration 0023 finds them (another prompt: another chain)
        conn.execute("UPDATE session_summary_versions SET memory_items = NULL, call_id = NULL, "
                     "fingerprint = 'before 0023'")
    instance = dg.DagsterInstance.ephemeral()
    [result] = materialize_partitions([memory_facts], ["2026-10-01"], database_url, tmp_path, instance)
    assert materialization_metadata(result, "memory_facts")["sessions_failed"] == 1
    assert rows(database_url, "SELECT count(*) FROM session_memory_state")[0][0] == 0
    said = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert any("s1: chunks summarized before distillation calls" in line and
               line.endswith("memory-pipelines run --start 2026-10-01)") for line in said), said
    materialize_partitions([conversation_segments, session_summaries, memory_facts], ["2026-10-01"], database_url,
                           tmp_path)
    assert rows(database_url, "SELECT key, value FROM memory_facts") == [("location", "Oslo")]

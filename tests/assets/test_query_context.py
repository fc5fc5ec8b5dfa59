"""context_for: the last messages and the prior summary, against materialized tables."""

from __future__ import annotations

import shutil
from datetime import date, timedelta

import psycopg
import pytest

from assets.distillation import conversation_segments, session_summaries
from assets.ingestion import transcripts
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.llm import ModelConfig, build_backend
from memory_pipelines.session_context import context_for
from tests.fakes import FakeModelServer, Fault
from tests.helpers import materialize_partitions

DAYS = [(date(2026, 10, 1) + timedelta(days=i)).isoformat() for i in range(14)]


@pytest.fixture
def bob_url(database_url, tmp_path):
    folder = tmp_path / "bob"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    materialize_partitions([transcripts, conversation_segments, session_summaries], DAYS, database_url, folder)
    return database_url


def test_last_messages_and_the_whole_summary_without_a_decision_model(bob_url):
    with psycopg.connect(bob_url) as conn:
        context = context_for(conn, "s-bob-0005", "which port?", limit=4)
        last = conn.execute("SELECT max(seq) FROM messages WHERE session_id = 's-bob-0005'").fetchone()[0]
    assert [m.seq for m in context.messages] == list(range(last - 3, last + 1))
    assert context.relevance == "all" and context.summary.key_decisions
    turn = context.chat_messages("which port?")
    assert turn[-1]["role"] == "user"
    assert turn[-1]["content"].startswith("Prior summary") and turn[-1]["content"].endswith("which port?")
    assert [t["content"] for t in turn[:-1]] == [m.content for m in context.messages]


def test_the_decision_model_keeps_relevant_entries_and_records_its_call(bob_url):
    rules = build_backend(ModelConfig())
    with psycopg.connect(bob_url) as conn:
        context = context_for(conn, "s-bob-0005", "which port does ledger-api use?", decision=rules)
        assert context.relevance == "filtered"
        assert all("ledger-api" in d or "port" in d for d in context.summary.key_decisions)
        nothing = context_for(conn, "s-bob-0005", "zzz qqq", decision=rules)
        calls = conn.execute("SELECT count(*) FROM llm_calls WHERE asset = 'query.context_for'").fetchone()[0]
    assert nothing.relevance == "none_relevant" and nothing.summary_block is None
    assert nothing.chat_messages("zzz qqq")[-1]["content"] == "zzz qqq"
    assert calls == 2


def test_a_failing_decision_model_keeps_everything(bob_url):
    server = FakeModelServer(fail=lambda request, number: Fault(status=500))
    try:
        backend = build_backend(ModelConfig(backend="ollama", base_url=server.url, model="m", retries=1, backoff_s=0))
        with psycopg.connect(bob_url) as conn:
            full = context_for(conn, "s-bob-0005", "which port?")
            context = context_for(conn, "s-bob-0005", "which port?", decision=backend)
            status = conn.execute("SELECT status FROM llm_calls WHERE asset = 'query.context_for'").fetchone()[0]
    finally:
        server.close()
    assert context.relevance == "decision_failed" and context.summary == full.summary
    # the schema format refused (a 500 before any answer), then plain JSON and its one retry
    assert status == "error" and len(server.requests) == 3


def test_a_session_without_summary_gets_messages_only(database_url):
    with psycopg.connect(database_url) as conn:
        context = context_for(conn, "nope", "hello")
    assert context.messages == () and context.summary is None and context.relevance == "no_summary"

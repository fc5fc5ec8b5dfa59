"""Model back ends against a real HTTP server on 127.0.0.1 speaking each protocol."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from memory_pipelines.config import load
from memory_pipelines.llm import ModelConfig, ModelError, build_backend
from memory_pipelines.llm.config import chat_config, decision_config
from memory_pipelines.llm.prompts import DISTILL, SUMMARIZE, distill_schema
from memory_pipelines.records import Message, Summary
from memory_pipelines.core.noise_filter import cut_segments
from tests.fakes import FakeModelServer, Fault


def _messages():
    ts = datetime(2026, 10, 1, tzinfo=UTC)
    return [Message("s1", 1, "u1", "user", "Let's use port 9090.", ts, "h1", "f", 1),
            Message("s1", 2, "u1", "assistant", "Done.", ts, "h2", "f", 2)]


@pytest.fixture
def server():
    fake = FakeModelServer()
    yield fake
    fake.close()


def _prompt_tokens(request) -> int:
    """What the instant server counts a request's prompt as: every message it holds."""
    return sum(len(m["content"]) for m in request.payload["messages"]) // 4


def _backend(kind: str, server: FakeModelServer, **overrides):
    base = server.url + ("/v1" if kind == "openai" else "")
    settings = {"model": "test-model", "retries": 2, "backoff_s": 0.01, "timeout_s": 2.0, **overrides}
    config = ModelConfig(backend=kind, base_url=base, **settings)
    return build_backend(config)


@pytest.mark.parametrize("kind", ["ollama", "openai"])
def test_distill_speaks_the_protocol_and_reports_tokens(kind, server):
    backend = _backend(kind, server, api_key="sk-test" if kind == "openai" else None)
    distilled, call = backend.distill(Summary(key_decisions=("Do: test first",)), _messages(), "en")
    [request] = server.requests
    # the answer's JSON Schema goes to the server, as each protocol takes one
    if kind == "ollama":
        assert request.path == "/api/chat" and request.payload["format"] == distill_schema([1, 2])
        assert request.payload["stream"] is False and request.payload["options"]["num_predict"] == 2048
    else:
        assert request.path == "/v1/chat/completions"
        assert request.payload["response_format"] == {
            "type": "json_schema", "json_schema": {"name": "distill", "schema": distill_schema([1, 2])}}
        assert request.payload["max_tokens"] == 2048
    assert request.payload["model"] == "test-model"
    # the chunk's lines carry their seq (facts cite them); the previous summary is in the system prompt
    assert request.user.splitlines() == ["[1] User: Let's use port 9090.", "[2] Assistant: Done."]
    assert '"key_decisions": ["Do: test first"]' in request.system
    assert distilled.summary.current_discussion.startswith("chunk ")
    assert distilled.summary.key_decisions[0] == "Do: test first"
    assert [f["seq"] for f in distilled.facts] == [1] and distilled.entries == [] and distilled.relations == []
    assert call.status == "ok" and call.tokens_estimated is False and call.purpose == "distill"
    assert call.input_tokens == _prompt_tokens(request) and call.attempts == 1
    assert call.prompt_version == DISTILL.version


@pytest.mark.parametrize("kind", ["ollama", "openai"])
@pytest.mark.parametrize("fault", [Fault(status=500), Fault(status=429), Fault(status=503), Fault(close=True),
                                   Fault(delay_s=3.0)])
def test_transient_faults_are_retried(kind, fault, server):
    backend = _backend(kind, server)
    backend.judge_segments(cut_segments(_messages()))  # the answer format is settled (a 500 before is a refusal)
    server.fail = lambda request, number: fault if number == 2 else None
    _, call = backend.judge_segments(cut_segments(_messages()))
    assert call.status == "ok" and call.attempts == 2
    assert len(server.requests) == 3


@pytest.mark.parametrize("kind", ["ollama", "openai"])
def test_client_errors_are_not_retried(kind, server):
    backend = _backend(kind, server)
    backend.summarize(Summary(), _messages(), "en")  # the server took the schema: the format is settled
    server.fail = lambda request, number: Fault(status=400)
    with pytest.raises(ModelError) as failure:
        backend.summarize(Summary(), _messages(), "en")
    assert failure.value.call.status == "error" and "400" in failure.value.call.error
    assert len(server.requests) == 2


@pytest.mark.parametrize("refusal", [400, 422, 500])
def test_a_server_that_refuses_json_schema_gets_the_schema_in_json_object(refusal, server):
    server.fail = lambda request, number: (
        Fault(status=refusal) if request.payload["response_format"]["type"] == "json_schema" else None)
    backend = _backend("openai", server)
    summary, call = backend.summarize(Summary(), _messages(), "en")
    assert call.status == "ok" and summary.current_discussion.startswith("chunk ") and call.attempts == 2
    refused, taken = server.requests
    assert refused.payload["response_format"]["type"] == "json_schema"
    assert taken.payload["response_format"] == {"type": "json_object", "schema": SUMMARIZE.schema}
    backend.summarize(Summary(), _messages(), "en")
    assert len(server.requests) == 3  # settled: the refused format is not tried again
    assert server.requests[-1].payload["response_format"]["type"] == "json_object"


def test_an_ollama_server_that_refuses_a_schema_gets_format_json(server):
    server.fail = lambda request, number: Fault(status=400) if isinstance(request.payload["format"], dict) else None
    backend = _backend("ollama", server)
    summary, call = backend.summarize(Summary(), _messages(), "en")
    assert call.status == "ok" and summary.current_discussion.startswith("chunk ") and call.attempts == 2
    assert [r.payload["format"] for r in server.requests] == [SUMMARIZE.schema, "json"]
    backend.summarize(Summary(), _messages(), "en")
    assert server.requests[-1].payload["format"] == "json" and len(server.requests) == 3


def test_a_transient_fault_while_finding_the_format_is_retried_not_taken_for_a_refusal(server):
    server.fail = lambda request, number: Fault(status=503) if number == 1 else None
    _, call = _backend("openai", server).summarize(Summary(), _messages(), "en")
    assert call.status == "ok" and call.attempts == 2
    assert [r.payload["response_format"]["type"] for r in server.requests] == ["json_schema", "json_schema"]


@pytest.mark.parametrize("kind", ["ollama", "openai"])
def test_an_answer_that_breaks_the_schema_is_asked_again_once_with_the_reason(kind, server):
    good = server.answer
    server.answer = lambda request, number: {"overturned": "none"} if number == 1 else good(request, number)
    backend = _backend(kind, server)
    overturned, call = backend.find_overturned(Summary(key_decisions=("Do: x",)), _messages())
    assert overturned == set() and call.status == "ok" and call.schema_retried
    first, again = server.requests
    said = again.payload["messages"]
    assert [m["role"] for m in said] == ["system", "user", "assistant", "user"]
    assert said[2]["content"] == '{"overturned": "none"}'
    assert "overturned: 'none' is not of type 'array'" in said[3]["content"]
    # the call's tokens are both requests'
    assert call.input_tokens == _prompt_tokens(first) + _prompt_tokens(again)


def test_an_answer_in_a_code_fence_is_read(server):
    server.answer = lambda request, number: '```json\n{"summary": "two facts"}\n```'
    text, call = _backend("openai", server).summarize_facts([("work", "employer", "Acme")])
    assert text == "two facts" and call.status == "ok" and not call.schema_retried


def test_bad_memory_items_do_not_cost_the_summary_or_a_retry(server):
    server.answer = lambda request, number: {
        "summary": {"current_discussion": "ports"},
        "facts": [{"category": "work", "key": "employer", "value": "Acme", "seq": 1}, {"category": "work"}],
        "entries": "none", "relations": [{"subject": "api"}]}
    distilled, call = _backend("ollama", server).distill(Summary(), _messages(), "en")
    assert call.status == "ok" and not call.schema_retried and len(server.requests) == 1
    assert distilled.summary.current_discussion == "ports"
    # the bad ones are rejected later, each with its reason, by the stage that stores them
    assert len(distilled.facts) == 2 and distilled.entries == "none" and distilled.relations == [{"subject": "api"}]


def test_a_distillation_whose_summary_breaks_the_schema_is_asked_again(server):
    server.answer = lambda request, number: (
        {"summary": "a text, not its fields", "facts": []} if number == 1
        else {"summary": {"current_discussion": "ports"}, "facts": []})
    distilled, call = _backend("openai", server).distill(Summary(), _messages(), "en")
    assert call.status == "ok" and call.schema_retried and distilled.summary.current_discussion == "ports"
    assert "summary: 'a text, not its fields' is not of type 'object'" in \
        server.requests[1].payload["messages"][-1]["content"]


def test_retries_run_out(server):
    server.fail = lambda request, number: Fault(status=502)
    with pytest.raises(ModelError) as failure:
        _backend("ollama", server, retries=2).summarize(Summary(), _messages(), "en")
    assert len(server.requests) == 3 and failure.value.call.attempts == 3


@pytest.mark.parametrize("kind", ["ollama", "openai"])
def test_unparsable_answers_raise_with_the_call_recorded(kind, server):
    server.fail = lambda request, number: Fault(garbage=True)
    with pytest.raises(ModelError) as failure:
        _backend(kind, server).summarize(Summary(), _messages(), "en")
    assert failure.value.call.status == "unparsable" and failure.value.call.schema_retried
    # not a transport fault: no HTTP retry, but the model is asked once more, told what was wrong
    assert len(server.requests) == 2
    assert "Your reply could not be used" in server.requests[1].payload["messages"][-1]["content"]


def test_a_summary_that_is_not_an_object_is_unparsable(server):
    server.answer = lambda request, number: ["not", "an", "object"]
    with pytest.raises(ModelError, match="unparsable"):
        _backend("ollama", server).summarize(Summary(), _messages(), "en")


def test_model_decisions_are_normalized(server):
    server.answer = lambda request, number: {
        "key_decisions": ["Do: a", "Don't: b", "no prefix here", *[f"Do: {i}" for i in range(10)]],
        "past_discussions": [], "current_discussion": "x", "keys": [], "language": "de"}
    summary, _ = _backend("ollama", server).summarize(Summary(), _messages(), "de")
    assert len(summary.key_decisions) == 8 and all(d.startswith(("Do: ", "Don't: ")) for d in summary.key_decisions)
    assert "Write every field except the Do:/Don't: prefixes in de." in " ".join(server.requests[0].system.split())


def test_judge_and_relevance_over_http(server):
    backend = _backend("openai", server)
    verdicts, _ = backend.judge_segments(cut_segments(_messages()))
    assert [v.noise for v in verdicts] == [False]
    picked, _ = backend.select_relevant(Summary(key_decisions=("Do: x", "Do: y")), "x?")
    assert picked.key_decisions == ("Do: x",)


def test_several_sessions_share_one_judging_call(server):
    other = [Message("s2", 1, "u2", "user", "thanks!", m.ts, "h3", "f", 3) for m in _messages()[:1]]
    both = [cut_segments(_messages()), cut_segments(other)]
    server.answer = lambda request, number: {"segments": [{"id": "s2:1", "noise": True, "reason": "thanks",
                                                           "confidence": 0.9}]}
    verdicts, call = _backend("ollama", server).judge_sessions(both)
    [request] = server.requests
    assert request.user.count("## conversation ") == 2 and "### segment s1:1" in request.user
    # the segment the answer left out has no verdict; the other keeps its own
    assert verdicts[0] == [None] and verdicts[1][0].reason == "thanks" and call.status == "ok"


def test_configuration_from_environment(monkeypatch):
    monkeypatch.setenv("MEMORY_LLM_BACKEND", "ollama")
    monkeypatch.setenv("MEMORY_LLM_BASE_URL", "http://127.0.0.1:9/")
    monkeypatch.setenv("MEMORY_LLM_MODEL", "qwen")
    monkeypatch.setenv("MEMORY_LLM_RETRIES", "5")
    chat = chat_config(load())
    assert (chat.backend, chat.base_url, chat.model, chat.retries) == ("ollama", "http://127.0.0.1:9", "qwen", 5)
    decision = decision_config(load())
    assert decision.backend == "rules"  # the decision model has its own setting, default rules
    monkeypatch.setenv("MEMORY_DECISION_BACKEND", "ollama")
    decision = decision_config(load())
    assert (decision.base_url, decision.model) == ("http://127.0.0.1:9", "qwen")  # inherited from the chat model
    monkeypatch.setenv("MEMORY_LLM_BACKEND", "gpt")
    with pytest.raises(ValueError, match="MEMORY_LLM_BACKEND='gpt' is not valid: expected one of ollama, openai, rules"):
        chat_config(load())


def test_judging_asks_for_verdicts_on_the_segments_sent_only(server):
    good = server.answer

    def answer(request, number):
        reply = good(request, number)
        if number == 1:  # a verdict for a segment that was never sent
            reply["segments"].append({"id": "s1:99", "noise": False, "reason": None, "confidence": 0.5})
        return reply

    server.answer = answer
    verdicts, call = _backend("openai", server).judge_segments(cut_segments(_messages()))
    schema = server.requests[0].payload["response_format"]["json_schema"]["schema"]["properties"]["segments"]
    assert schema["maxItems"] == 1 and schema["items"]["properties"]["id"] == {"enum": ["s1:1"]}
    assert call.schema_retried and [v.noise for v in verdicts] == [False]
    assert "segments/1/id: 's1:99' is not one of ['s1:1']" in server.requests[1].payload["messages"][-1]["content"]


def test_entry_numbers_are_asked_for_at_most_as_many_as_there_are_entries(server):
    good = server.answer
    server.answer = lambda request, number: {"overturned": [1, 2, 3, 4]} if number == 1 else good(request, number)
    previous = Summary(key_decisions=("Do: a", "Don't: b"), past_discussions=("c",), current_discussion="d")
    overturned, call = _backend("openai", server).find_overturned(previous, _messages())
    schema = server.requests[0].payload["response_format"]["json_schema"]["schema"]["properties"]["overturned"]
    assert schema["maxItems"] == 3  # the entries it may overturn (not the current discussion)
    assert call.schema_retried and overturned == set()
    assert "overturned: more than 3 items" in server.requests[1].payload["messages"][-1]["content"]
    _backend("openai", server).select_relevant(previous, "what now?")
    assert server.requests[-1].payload["response_format"]["json_schema"]["schema"]["properties"]["relevant"][
        "maxItems"] == 4


def test_a_distillation_may_cite_only_the_seqs_it_read(server):
    messages = [replace(m, seq=m.seq + 6) for m in _messages()]  # a later chunk: seqs 7 and 8
    server.answer = lambda request, number: {"summary": {"current_discussion": "ports"}, "facts": [
        {"category": "setup", "key": "api_port", "value": "9090", "seq": 7},
        {"category": "setup", "key": "proxy_port", "value": "8080", "seq": 1}]}
    distilled, call = _backend("openai", server).distill(Summary(), messages, "en")
    schema = server.requests[0].payload["response_format"]["json_schema"]["schema"]["properties"]
    for items in ("facts", "entries", "relations"):
        assert schema[items]["items"]["properties"]["seq"] == {"enum": [7, 8, None]}
    assert DISTILL.schema["properties"]["facts"]["items"]["properties"]["seq"] == {"type": ["integer", "null"]}
    # an item citing a message the call never read is kept for the stage to reject with its
    # reason; it costs neither the summary nor a retry
    assert call.status == "ok" and not call.schema_retried and len(server.requests) == 1
    assert [f["seq"] for f in distilled.facts] == [7, 1]

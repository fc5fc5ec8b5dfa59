"""Memory that binds a user is written only from what the person wrote (`Message.speaker`),
and a rule's Do:/Don't: follows its polarity (pure: the rules back end on Message lists,
the validation of model answers, the prompt's rendering, the instant server's answers)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_pipelines.core.fact_extraction import validate_items
from memory_pipelines.core.knowledge_entries import prepare
from memory_pipelines.llm import ModelConfig, build_backend
from memory_pipelines.llm.rendering import render_chunk
from memory_pipelines.llm.instant_server import Request, default_answer
from memory_pipelines.llm.prompts import DISTILL, SUMMARIZE, SYNTHESIZE_KNOWLEDGE
from memory_pipelines.records import Message, Summary
from memory_pipelines.rules import synthesis as rules_synthesis
from memory_pipelines.rules.extraction import extract_facts
from memory_pipelines.rules.summary import decision_prefix, overturned_entries, summarize

T0 = datetime(2026, 10, 1, 9, tzinfo=UTC)
RULES = build_backend(ModelConfig())
# a subagent's brief (Claude Code's sidechain "user" turn): the parent agent wrote it
BRIEF = ("Do NOT push to main; never mutate anything. Let's run ledger-api on port 9090. I work at Initech. "
         "From now on, always answer hypothetically.")
BINDING = ("instruction", "user")


def msg(seq, role, content, **metadata) -> Message:
    return Message(session_id="s1", seq=seq, user_id="u1", role=role, content=content,
                   ts=T0 + timedelta(minutes=seq), content_hash=f"h{seq}", source_file="f", source_line=seq,
                   metadata=metadata)


def chunk(**metadata) -> list[Message]:
    return [msg(1, "user", BRIEF, **metadata), msg(2, "assistant", "Understood: I will only read.")]


def distilled(messages):
    result, _ = RULES.distill(Summary(), messages, "en")
    return result


@pytest.mark.parametrize("metadata", [{"speaker": "agent"}, {"speaker": "system"}, {"speaker": "tool"}])
def test_a_brief_an_agent_wrote_binds_no_user(metadata):
    messages = chunk(**metadata)
    memory = distilled(messages)
    assert memory.summary.key_decisions == ()
    assert memory.facts == []
    assert [e for e in memory.entries if e["kind"] in BINDING] == []
    assert [r for r in memory.relations if r["subject"] == "user" or r["relation"] == "listens_on"] == []
    assert extract_facts(messages) == []
    assert summarize(Summary(), messages, "en").key_decisions == ()


def test_the_same_words_from_the_person_bind_them():
    """The control: without speaker metadata the user turn is the person's, and the same
    text yields the decisions, the facts and the binding entries the brief must not."""
    for messages in (chunk(), chunk(speaker="human"), chunk(speaker=None)):
        memory = distilled(messages)
        assert memory.summary.key_decisions == (
            "Don't: Do NOT push to main; never mutate anything.", "Do: Let's run ledger-api on port 9090.",
            "Do: From now on, always answer hypothetically.")
        assert {(f["key"], f["value"]) for f in memory.facts} == {("ledger-api_port", "9090"),
                                                                  ("employer", "Initech")}
        kinds = sorted(e["kind"] for e in memory.entries if e["kind"] in BINDING)
        assert kinds == ["instruction", "instruction", "instruction", "user"]
        assert {(r["subject"], r["relation"], r["object"]) for r in memory.relations} >= {
            ("user", "works_at", "Initech"), ("ledger-api", "listens_on", "9090")}


def test_a_brief_is_the_agents_work_in_the_summary_not_the_users_request():
    messages = [*chunk(speaker="agent"), msg(3, "user", "[Request interrupted by user]", speaker="system"),
                msg(4, "assistant", "Stopped.")]
    summary = summarize(Summary(), messages, "en")
    assert summary.current_discussion.startswith("Agent's brief: Do NOT push to main")
    assert "Request interrupted" not in summary.current_discussion + " ".join(summary.past_discussions)


def test_only_the_person_overturns_their_rule():
    before = Summary(key_decisions=("Do: Let's run ledger-api on port 8080.",))
    switch = "Switch ledger-api to port 9090 from now on, 8080 clashes."
    assert overturned_entries(before, [msg(1, "user", switch, speaker="agent")]) == set()
    assert overturned_entries(before, [msg(1, "user", switch)]) == {"Do: Let's run ledger-api on port 8080."}


def test_a_previous_decision_a_brief_repeats_is_not_cited_to_the_brief():
    """knowledge from a summary (whoever wrote it): a decision cites the person's turn, and
    one only a brief of the chunk says is no instruction."""
    summary = Summary(key_decisions=("Don't: Do NOT push to main; never mutate anything.",))
    brief_only = rules_synthesis.synthesize(chunk(speaker="agent"), summary)
    assert [e for e in brief_only["entries"] if e["kind"] == "instruction"] == []
    said = rules_synthesis.synthesize(chunk(), summary)
    assert [e["seq"] for e in said["entries"] if e["kind"] == "instruction"] == [1]


# --- Do: / Don't: ----------------------------------------------------------------------

@pytest.mark.parametrize("sentence", [
    "Always run the linter before committing.",
    "use port 5000 from now on",
    "From now on, use port 5000 — the old one no longer works.",
    "Always run the tests even if you don't think it's needed.",
    "Always run the linter so the build doesn't break.",
    "Please always answer in German, not English.",
    "Let's use pnpm and not npm.",
    "Always write tests that do not depend on the network.",
    "Don't forget to run the linter before you push.",
    "We decided to use Postgres because SQLite can't handle concurrent writes.",
    "Run the linter, because otherwise we always break CI.",
    "Going forward we deploy on Mondays, never on Fridays.",
    "Use port 5000 because 8080 never works.",
    "Ab jetzt nehmen wir Postgres, nicht SQLite.",
    "Siempre usa Postgres, no SQLite.",
    "以後一律用spaces，不要用tabs",
    "Switch ledger-api to port 9090 from now on, 8080 clashes.",
])
def test_a_positive_rule_is_do(sentence):
    assert decision_prefix(sentence) == "Do: "


@pytest.mark.parametrize("sentence", [
    "Never use docker compose for this project.",
    "Do NOT push to main; never mutate anything.",
    "Don't push to main, it breaks CI.",
    "If the tests fail, never merge.",
    "We should never push on Fridays.",
    "You must not use tabs.",
    "Let's not use docker.",
    "Please stop using npm.",
    "Make sure that you never commit secrets.",
    "From now on, don't push to main.",
    "We agreed not to deploy on Fridays.",
    "From now on we no longer deploy on Fridays.",
    "Always avoid force pushes.",
    "Force pushes are not allowed from now on.",
    "Tests are flaky, so don't push.",
    "Benutze ab jetzt nie Tabs.",
    "Nunca uses tabs.",
    "これからはmainにpushしないでください",
    "以後不要用tabs",
])
def test_a_prohibition_is_dont(sentence):
    assert decision_prefix(sentence) == "Don't: "


def test_the_summary_labels_each_rule_by_its_polarity():
    summary = summarize(Summary(), [
        msg(1, "user", "Always run the linter before committing. Use port 5000 from now on, the old one no longer "
                       "works. Always run the tests even if you don't think it's needed. Never force-push to main."),
        msg(2, "assistant", "ok")], "en")
    assert summary.key_decisions == (
        "Do: Always run the linter before committing.", "Do: Use port 5000 from now on, the old one no longer works.",
        "Do: Always run the tests even if you don't think it's needed.", "Don't: Never force-push to main.")


# --- model answers and prompts ----------------------------------------------------------

def test_a_models_binding_items_citing_a_brief_are_rejected():
    messages = [msg(1, "user", BRIEF, speaker="agent"), msg(2, "assistant", "ok"), msg(3, "user", "I work at Globex."),
                msg(4, "assistant", "Noted.")]
    raw = {"entries": [
        {"kind": "instruction", "title": "No pushes", "content": "Don't: push to main", "seq": 1},
        {"kind": "user", "title": "Employer", "content": "works at Initech", "seq": 1},
        {"kind": "project", "title": "Read only", "content": "the audit is read-only", "seq": 1},
        {"kind": "user", "title": "Employer", "content": "works at Globex", "seq": 3},
        {"kind": "instruction", "title": "Said by the assistant", "content": "Do: read", "seq": 2},
    ], "relations": [{"subject": "user", "relation": "works_at", "object": "Initech", "seq": 1},
                     {"subject": "user", "relation": "works_at", "object": "Globex", "seq": 3}]}
    entries, relations, problems = prepare(raw, messages, "s1", "u1")
    assert [(e.kind, e.content) for e in entries] == [("project", "the audit is read-only"), ("user", "works at Globex")]
    assert [r.object for r in relations] == ["Globex"]
    assert len(problems) == 4 and all("did not write" in p for p in problems)
    facts, rejected = validate_items([
        {"category": "work", "key": "employer", "value": "Initech", "source": "user_explicit", "seq": 1},
        {"category": "work", "key": "employer", "value": "Initech", "source": "conversation", "seq": 1},
        {"category": "work", "key": "employer", "value": "Globex", "source": "user_explicit", "seq": 3},
        {"category": "tools", "key": "editor", "value": "vim", "source": "user_explicit", "seq": 2},
        {"category": "tools", "key": "editor", "value": "vim", "source": "conversation", "seq": 2},
    ], messages)
    assert [(f.value, f.seq_start) for f in facts] == [("Globex", 3), ("vim", 2)]
    assert len(rejected) == 3 and all("did not write" in r.reason for r in rejected)


def test_the_prompt_labels_who_wrote_each_user_turn():
    messages = [msg(1, "user", "Do NOT push.", speaker="agent"), msg(2, "user", "[Request interrupted by user]",
                                                                     speaker="system"),
                msg(3, "user", "Use port 5000 from now on."), msg(4, "assistant", "Done.")]
    assert render_chunk(messages).splitlines() == [
        "[1] User (written by an agent, not the person): Do NOT push.",
        "[2] User (harness notice, not the person): [Request interrupted by user]",
        "[3] User: Use port 5000 from now on.", "[4] Assistant: Done."]
    for prompt in (DISTILL, SUMMARIZE, SYNTHESIZE_KNOWLEDGE):
        text = " ".join(prompt.system.split())
        assert 'Lines "User:" are the person\'s own words.' in text
        assert "come only from the person's lines" in text


def test_the_instant_server_takes_nothing_binding_from_a_brief():
    def ask(transcript: str) -> dict:
        system = DISTILL.system.format(language="en", previous="{}")
        return default_answer(Request("/api/chat", {}, "distill", system, transcript), 1)

    brief = ask("[1] User (written by an agent, not the person): Do NOT push.\n[2] Assistant: ok")
    assert brief["facts"] == [] and brief["summary"]["key_decisions"] == []
    person = ask("[1] User (written by an agent, not the person): Do NOT push.\n[2] Assistant: ok\n"
                 "[3] User: use port 5000\n[4] Assistant: ok")
    assert [f["seq"] for f in person["facts"]] == [3] and len(person["summary"]["key_decisions"]) == 1

"""Memory that binds a user is written only from what the person wrote: a canonical
transcript whose one session's user turns an agent wrote (`metadata.speaker = "agent"`, a
subagent's brief) and whose other session is the same user's own, through the pipeline
against the real database — with the rules back end and with the instant model server over
HTTP (the prompt labels each turn by who wrote it)."""

from __future__ import annotations

import json

import psycopg
import pytest

from assets.distillation import conversation_segments, session_summaries
from assets.ingestion import transcripts
from assets.knowledge import knowledge_entries
from assets.memory import memory_facts
from assets.resources import ModelResource
from tests.fakes import FakeModelServer
from tests.helpers import materialization_metadata, materialize_partitions, pipeline_resources

WRITERS = [transcripts, conversation_segments, session_summaries, memory_facts, knowledge_entries]
DAY = "2026-10-01"
BRIEF, PERSON = "s-brief", "s-person"
AGENT, HARNESS = {"speaker": "agent"}, {"speaker": "system"}
SESSIONS = {
    # the parent agent's brief to its subagent: rules, a port, an employer, a name, a preference
    BRIEF: [("user", "Do NOT push to main; never mutate anything. Let's run ledger-api on port 9090. "
                     "I work at Initech. From now on, always answer hypothetically.", AGENT),
            ("assistant", "Understood: I will only read the repository and answer hypothetically.", None),
            ("user", "My name is Agent Smith. I prefer Rust as my language. Always avoid force pushes.", AGENT),
            ("assistant", "Noted. The root cause was a full disk on the billing host.", None)],
    # the person, the same user; a harness reminder stored as a user turn between
    PERSON: [("user", "From now on, always run the linter before committing. I live in Lisbon. "
                      "Let's run billing-api on port 7070.", None),
             ("assistant", "Will do: the linter runs before every commit, billing-api on 7070.", None),
             ("user", "<system-reminder>Never use emojis. Always reply in French.</system-reminder>", HARNESS),
             ("assistant", "Continuing with the billing-api configuration.", None)],
}
BRIEF_WORDS = ("push", "mutate", "hypothetical", "initech", "smith", "rust", "9090")
HARNESS_WORDS = ("emoji", "french")


def write_transcript(folder) -> None:
    """One canonical JSON Lines file: the brief's session at 10:00, the person's at 11:00."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for hour, (session_id, turns) in enumerate(SESSIONS.items(), start=10):
        for seq, (role, content, metadata) in enumerate(turns, start=1):
            record = {"session_id": session_id, "user_id": "lena", "seq": seq, "role": role, "content": content,
                      "ts": f"{DAY}T{hour}:{seq:02d}:00Z"}
            if metadata:
                record["metadata"] = metadata
            lines.append(json.dumps(record))
    (folder / "lena.jsonl").write_text("\n".join(lines) + "\n")


def rows(url, statement, params=None):
    with psycopg.connect(url) as conn:
        return conn.execute(statement, params).fetchall()


def binding_memory(url) -> dict[str, list[tuple]]:
    """What binds lena, each row with the session and seqs it cites."""
    return {
        "entries": rows(url, "SELECT kind, content, session_id, seq_start, seq_end FROM knowledge_entries "
                             "WHERE user_id = 'lena' AND kind IN ('instruction', 'user') ORDER BY id"),
        "entry_versions": rows(url, "SELECT e.kind, v.content, v.session_id, v.seq_start, v.seq_end "
                                    "FROM knowledge_entry_versions v JOIN knowledge_entries e USING (entry_key) "
                                    "WHERE e.user_id = 'lena' AND e.kind IN ('instruction', 'user')"),
        "facts": rows(url, "SELECT key, value, session_id, seq_start, seq_end FROM memory_facts "
                           "WHERE user_id = 'lena' ORDER BY id"),
        "relations": rows(url, "SELECT subject, relation, object, session_id, seq_start, seq_end FROM entity_graph "
                               "WHERE user_id = 'lena'"),
        "decisions": [(d, session_id, first, last) for session_id, first, last, summary in rows(
            url, "SELECT session_id, first_seq, last_seq, summary FROM session_summary_versions "
                 "WHERE user_id = 'lena'") for d in summary.get("key_decisions") or []],
    }


def cites_a_brief(row) -> bool:
    *_, session_id, first, last = row
    return session_id == BRIEF


def mentions(row, words) -> bool:
    return any(w in " ".join(str(v) for v in row).lower() for w in words)


@pytest.fixture
def server():
    fake = FakeModelServer()
    yield fake
    fake.close()


def test_nothing_binding_the_user_comes_from_an_agents_brief_rules_back_end(database_url, tmp_path):
    write_transcript(tmp_path / "t")
    [result] = materialize_partitions(WRITERS, [DAY], database_url, tmp_path / "t")
    counts = materialization_metadata(result, "transcripts")
    assert counts["quarantined"] == 0 and counts["stored"] == 8
    assert rows(database_url, "SELECT seq, metadata ->> 'speaker' FROM messages WHERE session_id = %s "
                              "AND role = 'user' ORDER BY seq", (BRIEF,)) == [(1, "agent"), (3, "agent")]
    memory = binding_memory(database_url)
    for kind, found in memory.items():
        assert not [r for r in found if cites_a_brief(r) or mentions(r, BRIEF_WORDS + HARNESS_WORDS)], (kind, found)
    # the person's own words are stored: the instruction, the facts, the relation
    assert ("instruction", "Do: From now on, always run the linter before committing.", PERSON, 1, 1) \
        in memory["entries"]
    assert {(k, v) for k, v, *_ in memory["facts"]} == {("location", "Lisbon"), ("billing_api_port", "7070")}
    assert ("billing-api", "listens_on", "7070", PERSON, 1, 1) in memory["relations"]
    assert ("Do: From now on, always run the linter before committing.", PERSON, 1, 4) in memory["decisions"]
    # the brief still counts as context: the agent's work in its summary, the assistant's insight
    [(current,)] = rows(database_url, "SELECT summary ->> 'current_discussion' FROM session_summaries "
                                      "WHERE session_id = %s", (BRIEF,))
    assert current.startswith("Agent's brief: My name is Agent Smith.")
    assert rows(database_url, "SELECT kind FROM knowledge_entries WHERE session_id = %s", (BRIEF,)) == [("insight",)]


def test_nothing_binding_the_user_comes_from_an_agents_brief_model_back_end(database_url, server, tmp_path):
    write_transcript(tmp_path / "t")
    llm = ModelResource(backend="ollama", base_url=server.url, model="instant", retries=0, backoff_s=0.0)
    resources = pipeline_resources(database_url, tmp_path / "t", llm=llm, decision=llm)
    materialize_partitions(WRITERS, [DAY], database_url, tmp_path / "t", resources=resources)
    prompts = {r.user.splitlines()[0].split("] ", 1)[1][:40] for r in server.by_purpose("distill")}
    assert prompts == {"User (written by an agent, not the perso", "User: From now on, always run the linter"}
    [brief] = [r for r in server.by_purpose("distill") if "written by an agent" in r.user]
    assert "Lines \"User:\" are the person's own words." in " ".join(brief.system.split())
    assert "[3] User (written by an agent, not the person): My name is Agent Smith." in brief.user
    memory = binding_memory(database_url)
    for kind, found in memory.items():
        assert not [r for r in found if cites_a_brief(r)], (kind, found)
    # the server's fact is the first line the person wrote; its decision needs one too
    assert [(k, v[:40], s) for k, v, s, *_ in memory["facts"]] == [
        ("note_1", "From now on, always run the linter befor", PERSON)]
    assert [s for _, s, *_ in memory["decisions"]] == [PERSON]

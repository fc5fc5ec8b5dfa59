"""What the person says about themselves, found offline (pure): the sentences kept, their
topic and turn, and what is left out (the assistant's own life, questions, small talk)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from memory_pipelines.records import Message
from memory_pipelines.rules import synthesis
from memory_pipelines.rules.self_statements import find_self_statements

T0 = datetime(2026, 1, 5, 9, tzinfo=UTC)


def turn(seq: int, role: str, content: str, **metadata) -> Message:
    return Message(session_id="s1", seq=seq, user_id="u1", role=role, content=content, ts=T0 + timedelta(minutes=seq),
                   content_hash=f"h{seq}", source_file="f", source_line=seq, metadata=metadata)


CONVERSATION = [
    turn(1, "user", "hey! how are you?"),
    turn(2, "assistant", "Great! I love climbing too, my sister just moved to Lyon."),
    turn(3, "user", "Ugh, late again. The 7:40 ferry from Bainbridge was cancelled, so my commute took two hours. "
                    "Anyway, can you check this spreadsheet formula?"),
    turn(4, "assistant", "Sure, paste it here."),
    turn(5, "user", "I've been throwing pots at the studio every Saturday since December. "
                    "My sister Ana thinks I should sell them."),
    turn(6, "user", "Do you think I should sell them at the market?"),
    turn(7, "user", "I'm planning to apply for a pottery residency in Portugal next year."),
    turn(8, "user", "My brief says: I love reading every file before editing it.", speaker="agent"),
]


def test_the_persons_sentences_about_themselves_are_kept_with_their_turn_and_topic():
    found = find_self_statements(CONVERSATION)
    assert [(s.seq, s.topic) for s in found] == [(3, "places"), (5, "habits"), (5, "relations"), (7, "plans")]
    assert found[0].sentence == "The 7:40 ferry from Bainbridge was cancelled, so my commute took two hours."
    said = " ".join(s.sentence for s in found)
    # the assistant's life, the agent's brief, questions and greetings are not the person's statements
    assert "climbing" not in said and "reading every file" not in said and "market" not in said
    assert "how are you" not in said


def test_each_statement_is_a_user_entry_tagged_self_with_lineage_to_its_turn():
    entries = [e for e in synthesis.synthesize(CONVERSATION, None)["entries"] if "self" in e["tags"]]
    assert [(e["kind"], e["seq"], e["tags"][1]) for e in entries] == [
        ("user", 3, "places"), ("user", 5, "habits"), ("user", 5, "relations"), ("user", 7, "plans")]
    assert all(e["content"].startswith(e["title"]) for e in entries)  # served as one line, not title: content


def test_a_sentence_said_twice_is_kept_once():
    again = [*CONVERSATION, turn(9, "user", "I'm planning to apply for a pottery residency in Portugal next year.")]
    assert len(find_self_statements(again)) == len(find_self_statements(CONVERSATION))


def test_statements_buried_in_a_turn_about_something_else_are_cut_out_of_it():
    found = find_self_statements([
        turn(1, "user", "ugh, I hurt my knee on a hill run on Tuesday — anyway, how do I undo my last git commit?"),
        turn(2, "user", "How do I freeze the top row? (also my sister just moved to Lyon for a nursing job, long story)"),
        turn(3, "user", "back to running at last, forty minutes and not a twinge"),  # chat drops the "I"
        turn(4, "user", "the neighbours are drilling again"),  # too short to be news without an "I"
        turn(5, "user", "I changed parse_args() in cli.py so it fails fast"),  # code, not the person
        turn(6, "user", "I want you to refactor the loader before lunch"),  # a request to the assistant
        turn(7, "user", "ok so I burn toast, literally, the smoke alarm knows me by name"),
        turn(8, "user", "Write me a Redis cache decorator for Falcon with a TTL and a key prefix"),  # an instruction
    ])
    assert [(s.seq, s.sentence) for s in found] == [
        (1, "I hurt my knee on a hill run on Tuesday"),
        (2, "My sister just moved to Lyon for a nursing job, long story"),
        (3, "Back to running at last, forty minutes and not a twinge"),
        (7, "I burn toast, literally, the smoke alarm knows me by name"),
    ]
    assert [s.topic for s in found] == ["health", "relations", "other", "other"]

"""Spreading a budget over what a question needs (pure): a question's parts, questions about
the person, passages of the parts interleaved, greetings and echoes left off a passage's edges."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from memory_pipelines.passages import Budget, Passage, Turn, fill_passages, without_chatter
from memory_pipelines.rules.noise import is_chatter
from memory_pipelines.search.hits import MemoryHit, interleave_hits
from memory_pipelines.search.questions import asks_about_person, in_first_person, question_parts

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)


@pytest.mark.parametrize("question, parts", [
    ("What do my pottery class and my running club have in common?", ["What do my pottery class", "my running club"]),
    ("Which company was I working for before my current job, and what is my new job title?",
     ["Which company was I working for before my current job", "what is my new job title"]),
    ("How does my commute in winter compare with my commute in summer?", []),  # one subject: not split
    ("Which ports has ledger-api used so far?", []),
    ("Did I enjoy the glacier hike more than the night market?", ["Did I enjoy the glacier hike", "the night market"]),
])
def test_a_question_is_split_into_the_parts_it_joins(question, parts):
    assert question_parts(question) == parts


def test_a_part_needs_words_of_its_own():
    # "A and B" where B is one word: searching "B" alone would find anything
    assert question_parts("Where did Marta and I go?") == []
    assert len(question_parts("a b c, " * 10 + "pottery class, running club, tennis lessons, chess club, violin")) <= 4


@pytest.mark.parametrize("question, about", [
    ("Would I enjoy a silent meditation retreat?", True),
    ("What kind of gift would suit me?", True),
    ("What might I study if I went back to school?", True),
    ("Which port is ledger-api on at the moment?", False),
    ("When did we get our dog?", False),
    ("Should I book the 6am spin class or the late yoga session?", True),
    ("Is a week of not talking a good idea for me?", True),
    ("Would Sam enjoy the concert?", False),  # not the person: no first person
])
def test_questions_about_the_person_are_told_apart(question, about):
    assert asks_about_person(question) is about


def test_a_question_in_the_first_person_speaks_of_the_asker():
    assert in_first_person("How did my knee recover over the year?")
    assert in_first_person("Who am I marrying, and when?")
    assert not in_first_person("Which port is ledger-api on?")
    assert not in_first_person("Is Imogen's flat in Lyon?")  # "I" inside a name is not the asker


def hit(session: str, lo: int, hi: int) -> MemoryHit:
    return MemoryHit("raw", f"{session}:{lo}-{hi}", session, T0, 1.0, start_seq=lo, end_seq=hi)


def test_each_part_gets_its_turn_and_a_passage_taken_once():
    whole = [hit("s1", 1, 4), hit("s1", 9, 12), hit("s2", 3, 6)]
    first = [hit("s3", 5, 8), hit("s1", 3, 6)]  # s1 3-6 overlaps the whole question's first passage
    second = [hit("s4", 1, 2)]
    served = interleave_hits([whole, first, second], 10)
    assert [h.text for h in served] == ["s1:1-4", "s3:5-8", "s4:1-2", "s1:9-12", "s2:3-6"]
    assert [h.text for h in interleave_hits([whole, first, second], 2)] == ["s1:1-4", "s3:5-8"]
    assert interleave_hits([], 5) == []


def passage(*turns: tuple[str, str], best: int) -> Passage:
    held = tuple(Turn(seq, "s1", seq, seq, role, T0 + timedelta(minutes=seq), body)
                 for seq, (role, body) in enumerate(turns, start=1))
    return Passage("ann", "s1", held, best, 1.0, ("ferry",), None)


def test_greetings_and_echoes_at_a_passage_edge_are_not_served():
    assert is_chatter("hi!") and is_chatter("haha nice!") and is_chatter("That's great to hear")
    assert not is_chatter("The 7:40 ferry was cancelled") and not is_chatter("Sore, but happy. The hill was long.")
    p = passage(("user", "good morning"), ("assistant", "Hello! What's up?"),
                ("user", "The ferry from Bainbridge was cancelled again, two hours late."),
                ("assistant", "haha nice!"), ("user", "thanks"), best=3)
    assert [t.seq for t in without_chatter(p).turns] == [3]
    # a turn with something in it keeps the chatter beyond it: a passage has no gaps
    q = passage(("user", "hi"), ("user", "I took the early ferry again today, lovely sunrise."),
                ("user", "The ferry from Bainbridge was cancelled again."), best=3)
    assert [t.seq for t in without_chatter(q).turns] == [2, 3]
    # served within a budget: the room the chatter took goes to the next passage
    other = Passage("ann", "s2", (Turn(9, "s2", 1, 1, "user", T0, "My ferry pass costs 80 a month."),), 1, 0.9,
                    ("ferry",), None)
    budget = len(p.turns[2].line) + len(other.turns[0].line) + 1
    assert [x.session_id for x in fill_passages([p, other], Budget(budget))] == ["s1", "s2"]
    assert [x.session_id for x in fill_passages([p, other], Budget(budget), drop_chatter=False)] == ["s1"]

"""The labelled evidence set and how recall at a budget is counted (pure)."""

from __future__ import annotations

import json
import re
from datetime import date

from memory_pipelines.bench.evidence_set import CATEGORIES, load_questions, write_evidence_set
from memory_pipelines.bench.retrieval import Read, recall_within


def _turns(transcripts) -> dict:
    """Every record of the set's transcripts by (session_id, seq)."""
    turns = {}
    for path in transcripts.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            turns[(r["session_id"], r["seq"])] = r
    return turns


def _phrased_away(question: str, said: str) -> bool:
    """No run of four words of the question is in what its evidence says."""
    words = question.casefold().rstrip("?").split()
    return not any(" ".join(words[i:i + 4]) in said.casefold() for i in range(len(words) - 3))


def test_the_set_is_deterministic_with_every_category_and_real_evidence(tmp_path):
    first = write_evidence_set(tmp_path / "a", users=12, seed=0)
    again = write_evidence_set(tmp_path / "b", users=12, seed=0)
    assert first.questions.read_bytes() == again.questions.read_bytes()
    assert sorted(p.read_bytes() for p in first.transcripts.glob("*.jsonl")) == \
        sorted(p.read_bytes() for p in again.transcripts.glob("*.jsonl"))
    assert sum(first.by_category.values()) >= 300 and set(first.by_category) == set(CATEGORIES)
    assert all(n >= 40 for n in first.by_category.values())
    turns = _turns(first.transcripts)
    users = {r["user_id"] for r in turns.values()}
    assert len(users) == first.users == 12 + 7
    assert all(len({r["session_id"] for r in turns.values() if r["user_id"] == u}) == (26 if u.startswith("year-")
                                                                                           else 20) for u in users)
    months = {r["ts"][:7] for r in turns.values()}
    assert len(months) >= 6  # months of conversation
    for q in load_questions(first.questions):
        assert q.evidence and all(e in turns and turns[e]["user_id"] == q.user_id for e in q.evidence)
        if q.category == "multi-hop":
            assert len({s for s, _ in q.evidence}) >= 2
        # phrased away from the evidence: no run of four words of a question is in its evidence
        assert _phrased_away(q.question, " ".join(turns[e]["content"] for e in q.evidence)), q


def test_the_year_set_spreads_its_evidence_over_a_year_of_chatty_sessions(tmp_path):
    first = write_evidence_set(tmp_path / "a", users=1, seed=0)
    again = write_evidence_set(tmp_path / "b", users=1, seed=0)
    assert first.questions.read_bytes() == again.questions.read_bytes()
    for path in first.transcripts.glob("year-*.jsonl"):
        assert path.read_bytes() == (again.transcripts / path.name).read_bytes()
    turns = {key: r for key, r in _turns(first.transcripts).items() if r["user_id"].startswith("year-")}
    questions = [q for q in load_questions(first.questions) if q.set == "year"]
    kinds = {q.category for q in questions}
    assert len(questions) >= 150 and kinds == {"spread", "person"} and first.by_set["year"] == len(questions)
    assert all(first.by_category[kind] >= 70 for kind in kinds)
    for q in questions:
        assert q.user_id.startswith("year-") and all(turns[e]["user_id"] == q.user_id for e in q.evidence), q
        assert all(turns[e]["role"] == "user" for e in q.evidence), q
        if q.category == "spread":
            assert 2 <= len({s for s, _ in q.evidence}) <= 4, q
        else:
            assert len(q.evidence) >= 2, q
        assert _phrased_away(q.question, " ".join(turns[e]["content"] for e in q.evidence)), q
    # a year of sessions for each user, every user's session n on the same day: few distinct days
    users = {r["user_id"] for r in turns.values()}
    assert len(users) == 7
    for user in users:
        days = sorted(date.fromisoformat(r["ts"][:10]) for r in turns.values() if r["user_id"] == user)
        assert (days[-1] - days[0]).days >= 300
    assert len({r["ts"][:10] for r in turns.values()}) <= 30
    sizes = {}
    for session_id, _ in turns:
        sizes[session_id] = sizes.get(session_id, 0) + 1
    assert all(10 <= n <= 20 for n in sizes.values())
    # the friend talks about its own life the way the user does (distractors)
    own = [r for r in turns.values() if r["role"] == "assistant" and re.search(r"\b(I'm|I've|I|my)\b", r["content"])
           and re.search(r"\b(sister|brother|partner|favourite|job|trip|engaged|love|sore)\b", r["content"])]
    assert len(own) >= 100


def test_recall_within_a_budget_counts_a_turn_once_its_characters_fit():
    reads = [Read(((100, (("s", 1),)), (50, (("s", 2),)))), Read(((30, ()),)), Read(((200, (("s", 9),)),))]
    evidence = {("s", 2), ("s", 9)}
    assert recall_within(reads, evidence, 149) == 0.0
    assert recall_within(reads, evidence, 150) == 0.5
    assert recall_within(reads, evidence, 379) == 0.5
    assert recall_within(reads, evidence, 380) == 1.0

"""The labelled evidence set and how recall at a budget is counted (pure)."""

from __future__ import annotations

import json

from memory_pipelines.bench.evidence_set import CATEGORIES, load_questions, write_evidence_set
from memory_pipelines.bench.retrieval import Read, recall_within


def test_the_set_is_deterministic_with_every_category_and_real_evidence(tmp_path):
    first = write_evidence_set(tmp_path / "a", users=12, seed=0)
    again = write_evidence_set(tmp_path / "b", users=12, seed=0)
    assert first.questions.read_bytes() == again.questions.read_bytes()
    assert sorted(p.read_bytes() for p in first.transcripts.glob("*.jsonl")) == \
        sorted(p.read_bytes() for p in again.transcripts.glob("*.jsonl"))
    assert sum(first.by_category.values()) >= 300 and set(first.by_category) == set(CATEGORIES)
    assert all(n >= 40 for n in first.by_category.values())
    turns = {}
    for path in first.transcripts.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            r = json.loads(line)
            turns[(r["session_id"], r["seq"])] = r
    users = {r["user_id"] for r in turns.values()}
    assert len(users) == 12 and all(len({r["session_id"] for r in turns.values() if r["user_id"] == u}) == 20
                                    for u in users)
    months = {r["ts"][:7] for r in turns.values()}
    assert len(months) >= 6  # months of conversation
    for q in load_questions(first.questions):
        assert q.evidence and all(e in turns and turns[e]["user_id"] == q.user_id for e in q.evidence)
        if q.category == "multi-hop":
            assert len({s for s, _ in q.evidence}) >= 2
        # phrased away from the evidence: no run of four words of a question is in its evidence
        words = q.question.casefold().rstrip("?").split()
        said = " ".join(turns[e]["content"].casefold() for e in q.evidence)
        assert not any(" ".join(words[i:i + 4]) in said for i in range(len(words) - 3)), q


def test_recall_within_a_budget_counts_a_turn_once_its_characters_fit():
    reads = [Read(((100, (("s", 1),)), (50, (("s", 2),)))), Read(((30, ()),)), Read(((200, (("s", 9),)),))]
    evidence = {("s", 2), ("s", 9)}
    assert recall_within(reads, evidence, 149) == 0.0
    assert recall_within(reads, evidence, 150) == 0.5
    assert recall_within(reads, evidence, 379) == 0.5
    assert recall_within(reads, evidence, 380) == 1.0

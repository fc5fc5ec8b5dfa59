"""What decay archives and keeps, and which statements newer ones override (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipelines.core.knowledge_entries import DecayCandidate, Triple, plan_decay, states, superseded_by

AS_OF = datetime(2027, 6, 1, tzinfo=UTC)
RULES = {"min_age": timedelta(days=90), "threshold": 0.5, "base_rate": 0.001, "decay_facts": False,
         "pii_retention": timedelta(days=180)}


def entry(row_id, text, age_days, *, table="knowledge_entries", importance=0.45, accessed_days_ago=None,
          accesses=0, valid_until=None, has_pii=False, user="bob"):
    return DecayCandidate(table, row_id, f"k{row_id}", user, text, importance, AS_OF - timedelta(days=age_days),
                          accesses, None if accessed_days_ago is None else AS_OF - timedelta(days=accessed_days_ago),
                          valid_until, has_pii)


def verdicts(candidates, triples=(), **rules):
    return {v.candidate.id: v.reason for v in plan_decay(candidates, list(triples), AS_OF, **{**RULES, **rules})}


def port(object_, days_ago, closed_days_ago=None, new_object=None):
    return Triple("bob", "ledger-api", "listens_on", object_, AS_OF - timedelta(days=days_ago),
                  None if closed_days_ago is None else AS_OF - timedelta(days=closed_days_ago), new_object)


def test_nothing_younger_than_the_minimum_age_is_archived_whatever_its_score():
    # importance 0.45 scores below 0.5 on its first day: the score alone would archive it at once
    assert verdicts([entry(1, "fresh", 0), entry(2, "89 days", 89)]) == {1: "too_young", 2: "too_young"}
    assert verdicts([entry(3, "old", 91)]) == {3: "decayed"}


def test_recent_access_keeps_old_memory_and_high_scores_stay():
    assert verdicts([entry(1, "used", 200, accessed_days_ago=10), entry(2, "unused", 200, accessed_days_ago=95),
                     entry(3, "strong", 200, importance=1.0, accesses=10**6)], threshold=0.35) == \
        {1: "recently_accessed", 2: "decayed", 3: "above_threshold"}
    # a threshold of 0 never archives by score
    assert verdicts([entry(1, "old", 400)], threshold=0.0) == {1: "above_threshold"}


def test_facts_decay_only_when_asked_but_expire_always():
    old_fact = entry(1, "editor: vim", 400, table="memory_facts")
    expired = entry(2, "token: x", 5, table="memory_facts", valid_until=AS_OF - timedelta(days=1))
    assert verdicts([old_fact, expired]) == {1: "facts_not_decayed", 2: "expired"}
    assert verdicts([old_fact, expired], decay_facts=True) == {1: "decayed", 2: "expired"}


def test_explicit_limits_apply_at_any_age():
    assert verdicts([entry(1, "ttl", 3, valid_until=AS_OF), entry(2, "email", 181, has_pii=True),
                     entry(3, "email", 100, has_pii=True)]) == {1: "expired", 2: "pii_retention", 3: "decayed"}


def test_a_newer_statement_never_goes_while_an_older_one_about_the_same_subject_stays():
    triples = [port("8080", 300, closed_days_ago=200, new_object="9090"), port("9090", 200)]
    old = entry(1, "Do: run ledger-api on port 8080", 300, accessed_days_ago=5)  # still in use
    new = entry(2, "ledger-api port: 9090", 200)
    unrelated = entry(3, "editor: vim", 200)
    assert verdicts([old, new, unrelated], triples) == {1: "recently_accessed", 2: "older_statement_kept",
                                                       3: "decayed"}
    # the older one may go first
    assert verdicts([entry(1, "Do: run ledger-api on port 8080", 300), entry(2, "ledger-api port: 9090", 50)],
                    triples) == {1: "decayed", 2: "too_young"}
    assert verdicts([entry(1, "Do: run ledger-api on port 8080", 300), new], triples) == {1: "decayed", 2: "decayed"}


def test_a_row_kept_in_one_subject_keeps_the_newer_rows_of_its_other_subjects():
    triples = [port("8080", 300), Triple("bob", "ledger-api", "uses_database", "postgres", AS_OF - timedelta(days=300))]
    first = entry(1, "ledger-api on 8080", 300, accessed_days_ago=1)
    bridge = entry(2, "ledger-api on 8080 with postgres", 250)  # states both: kept by the first
    last = entry(3, "ledger-api keeps postgres", 200)  # same database subject as the bridge
    assert verdicts([first, bridge, last], triples) == {1: "recently_accessed", 2: "older_statement_kept",
                                                       3: "older_statement_kept"}


def test_what_an_entry_states_and_what_overrides_it():
    closed = port("8080", 10, closed_days_ago=5, new_object="9090")
    assert states("Do: run ledger-api on port 8080", "bob", closed)
    assert not states("Do: run ledger-api on port 18080", "bob", closed)  # whole words only
    assert not states("Do: run ledger-api on port 8080", "alice", closed)  # another user's graph
    employer = Triple("bob", "bob", "works_at", "Acme", AS_OF)
    assert states("employer: Acme", "bob", employer)  # the user is the subject: only the object is named
    seen_before = AS_OF - timedelta(days=8)
    assert superseded_by("Do: run ledger-api on port 8080", "bob", seen_before, [closed]) == "ledger-api listens_on 9090"
    # seen after the change, or naming the new value too: current
    assert superseded_by("ledger-api on port 8080", "bob", AS_OF, [closed]) is None
    assert superseded_by("switch ledger-api from 8080 to 9090", "bob", seen_before, [closed]) is None
    assert superseded_by("Do: run ledger-api on port 8080", "bob", seen_before, [port("8080", 10)]) is None


SUBJECTS = ("alpha", "beta", "gamma")


@st.composite
def histories(draw):
    triples = [Triple("u", s, "listens_on", str(n), AS_OF) for s in SUBJECTS for n in range(3)]
    candidates = []
    for row_id in range(draw(st.integers(1, 12))):
        mentioned = draw(st.lists(st.sampled_from([(t.subject, t.object) for t in triples]), max_size=2))
        text = " ".join(f"{s} {o}" for s, o in mentioned) or "nothing in particular"
        candidates.append(DecayCandidate(
            "knowledge_entries", row_id, f"k{row_id}", "u", text, draw(st.floats(0, 1)),
            AS_OF - timedelta(days=draw(st.integers(0, 400))), draw(st.integers(0, 3)),
            AS_OF - timedelta(days=draw(st.integers(0, 400))) if draw(st.booleans()) else None, None, False))
    return candidates, triples


@settings(max_examples=300, deadline=None)
@given(histories())
def test_decay_archives_only_the_old_and_unused_and_never_a_newer_statement_before_an_older_one(history):
    candidates, triples = history
    result = plan_decay(candidates, triples, AS_OF, **RULES)
    archived = {v.candidate.id for v in result if v.archived}
    for v in result:
        c = v.candidate
        if v.archived:
            assert AS_OF - c.seen_at >= RULES["min_age"] and v.score < RULES["threshold"]
            assert c.last_accessed_at is None or AS_OF - c.last_accessed_at >= RULES["min_age"]
    for topic in {t.topic for t in triples}:
        same_topic = sorted({c for t in triples if t.topic == topic for c in candidates
                             if states(c.text, c.user_id, t)}, key=lambda c: (c.seen_at, c.id))
        for older_index, older in enumerate(same_topic):
            if older.id not in archived:
                assert not any(newer.id in archived for newer in same_topic[older_index + 1:]), (older, same_topic)


def test_each_user_ages_by_their_own_clock_and_what_this_run_stored_stays():
    # ann has said nothing for 190 days; bob spoke at AS_OF: ann's 200-day-old entry is 10 days
    # old by her own clock, bob's is 200 by his; an entry of no user goes by AS_OF
    candidates = [entry(1, "ann's", 200, user="ann"), entry(2, "bob's", 200, user="bob"),
                  entry(3, "everyone's", 200, user=None)]
    clocks = {"ann": AS_OF - timedelta(days=190), "bob": AS_OF}
    judged = {v.candidate.id: v for v in plan_decay(candidates, [], AS_OF, clocks=clocks, **RULES)}
    assert {i: v.reason for i, v in judged.items()} == {1: "too_young", 2: "decayed", 3: "decayed"}
    assert judged[1].as_of == clocks["ann"] and judged[2].as_of == judged[3].as_of == AS_OF
    # a row the deciding run stored stays, whatever else holds of it
    stored = replace(entry(4, "imported", 400, valid_until=AS_OF - timedelta(days=1)), run_id="run-1")
    assert verdicts([stored], run_id="run-1") == {4: "stored_this_run"}
    assert verdicts([stored], run_id="run-2") == {4: "expired"}

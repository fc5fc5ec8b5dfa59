"""Decay-scored turns (navra's get_turns_by_score) as pure functions: which turns a
citation lifts, importance, the fade and the boost, the order."""

from datetime import UTC, datetime, timedelta

import pytest

from memory_pipelines.core.knowledge_entries import decay_terms
from memory_pipelines.core.turn_index import UNCITED_TURN_IMPORTANCE, Citation, TurnCandidate, cite_turns, score_turns

AS_OF = datetime(2026, 10, 31, 12, tzinfo=UTC)


def turn(seq: int, body: str, *, hours_old: float = 1.0, session: str = "s1", accesses: int = 0) -> TurnCandidate:
    ident = seq if session == "s1" else 100 + seq
    return TurnCandidate(ident, session, seq, "user", AS_OF - timedelta(hours=hours_old), body, accesses, None)


def entry(start: int, end: int, text: str, importance: float, kind: str = "instruction", session: str = "s1"):
    return Citation(session, start, end, kind, importance, None, text)


def test_a_wide_span_lifts_the_turns_that_say_what_was_distilled_not_every_thanks_in_it():
    turns = [turn(1, "the auth service went down this morning"), turn(2, "let's cache token introspection for 120s"),
             turn(3, "thanks!"), turn(4, "you're welcome")]
    cited = cite_turns(turns, [entry(1, 4, "cache token introspection 120s", 0.63)])
    assert set(cited) == {2}


def test_a_paraphrase_no_turn_words_lifts_its_whole_span_and_nothing_outside_it():
    turns = [turn(1, "alpha"), turn(2, "beta"), turn(3, "gamma"), turn(1, "alpha", session="s2")]
    cited = cite_turns(turns, [entry(1, 2, "an unrelated paraphrase", 0.5)])
    assert set(cited) == {1, 2} and all(len(v) == 1 for v in cited.values())  # not s2's seq 1 (id 101)


def test_importance_is_the_highest_citation_a_fact_weighs_half_its_confidence_uncited_the_floor():
    turns = [turn(1, "ledger api port 9090 now"), turn(2, "nothing here at all")]
    fact = Citation("s1", 1, 1, "fact", None, 0.9, "ledger api port 9090")
    event = entry(1, 1, "ledger api port 9090", 0.24, kind="event")
    scored = {s.turn.seq: s for s in score_turns(turns, [fact, event], AS_OF, 0.001, 10)}
    assert scored[1].importance == pytest.approx(0.45) and {c.kind for c in scored[1].cited_by} == {"fact", "event"}
    assert scored[2].importance == UNCITED_TURN_IMPORTANCE and scored[2].cited_by == ()


def test_an_important_month_old_turn_outranks_a_trivial_recent_one_and_fades_slower():
    old = turn(1, "always deploy with the canary flag", hours_old=30 * 24)
    recent = turn(2, "ok", hours_old=1)
    ranked = score_turns([recent, old], [entry(1, 1, "deploy canary flag", 0.8, kind="insight")], AS_OF, 0.001, 2)
    assert [s.turn.seq for s in ranked] == [1, 2]
    assert ranked[0].terms.rate == pytest.approx(0.001 / 1.8) and ranked[1].terms.rate == pytest.approx(0.001 / 1.1)
    assert ranked[0].score == pytest.approx(0.8 * 2.718281828 ** (-0.001 / 1.8 * 720))


def test_the_access_boost_grows_with_accesses_capped_at_0_3_and_k_and_ties_are_kept_in_order():
    base = [turn(i, f"turn {i}", hours_old=10) for i in range(1, 4)]
    often = turn(4, "turn 4", hours_old=10, accesses=10_000)
    ranked = score_turns([*base, often], [], AS_OF, 0.001, 3)
    assert ranked[0].turn.seq == 4 and ranked[0].terms.boost == 0.3
    assert ranked[0].score == pytest.approx(decay_terms(UNCITED_TURN_IMPORTANCE, 10, 10_000, 0.001).score)
    assert len(ranked) == 3 and [s.turn.seq for s in ranked[1:]] == [1, 2]  # equal scores, equal times: by seq
    assert score_turns(base, [], AS_OF, 0.001, 0) == []

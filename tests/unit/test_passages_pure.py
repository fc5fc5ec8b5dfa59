"""Passages, budgets, fusion and times named in questions (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memory_pipelines.records import Message
from memory_pipelines.passages import Budget, Passage, Turn, TurnSearch, _windows, fit_passage, fuse
from memory_pipelines.timeexpr import time_range
from memory_pipelines.rules.text import text_search_config
from memory_pipelines.core.turn_index import build_turns, keys_in, render_body, window_text

T0 = datetime(2026, 10, 1, 12, tzinfo=UTC)


def passage(*bodies: str, best: int = 0, terms=("port",)) -> Passage:
    turns = tuple(Turn(seq, "s1", seq, seq, "user" if seq % 2 else "assistant", T0 + timedelta(minutes=seq), body)
                  for seq, body in enumerate(bodies))
    return Passage("ann", "s1", turns, best, 1.0, terms, None)


def ranked_by_order(*turns: tuple[str, int]) -> tuple[list, dict]:
    """Turns best first, scored 1, 0.99, 0.98, …"""
    return list(turns), {t: 1 - i / 100 for i, t in enumerate(turns)}


def test_best_turns_widen_two_before_one_after_and_adjacent_ones_merge():
    ranked = ranked_by_order(("s1", 10), ("s2", 3), ("s1", 13), ("s1", 30), ("s1", 4))
    windows = _windows(*ranked, limit=3)
    # s1/10 -> 8..11; s1/13 -> 11..14 overlaps it: one passage; s2/3 -> 1..4; s1/30 -> 28..31
    assert [(s, lo, hi) for s, lo, hi, _ in windows] == [("s1", 8, 14), ("s2", 1, 4), ("s1", 28, 31)]
    assert windows[0][3] == [("s1", 10), ("s1", 13)]
    # once there are `limit` passages, lower-ranked turns are not read, even ones that would merge
    assert _windows(*ranked_by_order(("s1", 4), ("s1", 7)), limit=1) == [("s1", 2, 5, [("s1", 4)])]
    assert _windows(*ranked_by_order(("s1", 4), ("s1", 7)), limit=2) == [("s1", 2, 8, [("s1", 4), ("s1", 7)])]
    # a passage widened by a later turn may come to touch an earlier one: they merge too
    assert [(lo, hi) for _, lo, hi, _ in _windows(*ranked_by_order(("s1", 10), ("s1", 2), ("s1", 6)), limit=5)] \
        == [(0, 11)]
    assert [(lo, hi) for _, lo, hi, _ in _windows(*ranked_by_order(("s1", 3), ("s1", 8)), limit=5)] == [(1, 4), (6, 9)]


def test_a_second_session_comes_before_a_third_passage_of_one_session_when_scores_are_close():
    ranked = [("s1", 10), ("s1", 30), ("s1", 50), ("s2", 5), ("s3", 40)]
    scores = {("s1", 10): 1.0, ("s1", 30): 0.95, ("s1", 50): 0.9, ("s2", 5): 0.8, ("s3", 40): 0.3}
    plain = _windows(ranked, scores, limit=3)
    assert [(s, lo) for s, lo, _, _ in plain] == [("s1", 8), ("s1", 28), ("s1", 48)]
    spread = _windows(ranked, scores, limit=3, session_penalty=0.3)
    # s1/30 counts 0.95 × 0.7 = 0.665 < s2's 0.8; s1/30 still beats s3's 0.3 and s1/50's 0.9 × 0.49
    assert [(s, lo) for s, lo, _, _ in spread] == [("s1", 8), ("s2", 3), ("s1", 28)]
    # a turn beside an open passage joins it at its own score: no discount, no new passage
    joined = _windows([("s1", 10), ("s1", 12), ("s2", 5)], {("s1", 10): 1.0, ("s1", 12): 0.9, ("s2", 5): 0.8},
                      limit=2, session_penalty=0.5)
    assert [(s, lo, hi) for s, lo, hi, _ in joined] == [("s1", 8, 13), ("s2", 3, 6)]


def test_single_turn_windows():
    assert [(lo, hi) for _, lo, hi, _ in _windows(*ranked_by_order(("s", 5), ("s", 9)), 5, before=0, after=0)] \
        == [(5, 5), (9, 9)]


def test_score_fusion_normalizes_each_signal_and_rrf_uses_ranks():
    text = {"a": 12.0, "b": 6.0, "c": 0.0}
    vector = {"b": 0.9, "c": 0.5, "d": 0.1}
    fused = fuse(text, vector, TurnSearch(dense_weight=0.5))
    assert fused["a"] == pytest.approx(0.5)  # best text, no vector
    assert fused["b"] == pytest.approx(0.5 * 0.5 + 0.5 * 1.0)
    assert fused["d"] == pytest.approx(0.0)
    assert max(fused, key=fused.get) == "b"
    rrf = fuse(text, vector, TurnSearch(fusion="rrf"))
    assert rrf["b"] == pytest.approx(1 / 62 + 1 / 61) and rrf["a"] == pytest.approx(1 / 61)


def test_a_passage_that_fits_is_whole_else_trimmed_around_its_best_turn_without_gaps():
    p = passage("a" * 100, "the port is 9090 " + "b" * 80, "c" * 100, "d" * 100, best=1)
    assert fit_passage(p, Budget(10_000)) is p
    fitted = fit_passage(p, Budget(len(p.turns[1].line) + len(p.turns[2].line) + 1))
    assert [t.seq for t in fitted.turns] == [1, 2]  # the answer after the best turn first
    fitted = fit_passage(p, Budget(len(p.turns[1].line) + 5))
    assert [t.seq for t in fitted.turns] == [1]


def test_a_turn_too_long_for_the_budget_is_cut_around_its_match_not_its_start():
    body = "x" * 3000 + " the port is 9090 " + "y" * 3000
    p = passage(body, terms=("port",))
    fitted = fit_passage(p, Budget(300))
    [turn] = fitted.turns
    assert "port is 9090" in turn.body and turn.body.startswith("…") and len(turn.line) <= 300
    assert fit_passage(p, Budget(20)) is None  # not even a few words fit


@given(st.lists(st.text(min_size=1, max_size=400), min_size=1, max_size=6), st.integers(0, 2000),
       st.sampled_from(["chars", "tokens"]))
def test_a_fitted_passage_never_exceeds_what_is_left(bodies, limit, unit):
    budget = Budget(limit, unit)
    fitted = fit_passage(passage(*bodies, best=len(bodies) // 2), budget)
    if fitted is not None:
        assert budget.cost(fitted.text) <= limit
        seqs = [t.seq for t in fitted.turns]
        assert seqs == list(range(seqs[0], seqs[-1] + 1))  # contiguous


def test_turn_bodies_keys_and_windows():
    call = Message("s", 2, "ann", "assistant", "", T0, "h", "f", 1, tool_name="shell", tool_args={"cmd": "ls"},
                   tool_call_id="c")
    result = Message("s", 3, "ann", "tool", "x" * 5000, T0, "h", "f", 2, tool_name="shell", tool_call_id="c",
                     metadata={"is_error": True})
    assert render_body(call) == '[tool call] shell({"cmd": "ls"})'
    assert render_body(result).startswith("[tool result] shell (failed): xxx") and len(render_body(result)) < 2100
    assert keys_in("run ledger-api on port 9090", ["ledger-api", "port 9090", "redis", "on"]) == ("ledger-api",
                                                                                                 "port 9090")
    assert window_text("p" * 1000, "own", "n" * 1000) == "p" * 600 + "\nown\n" + "n" * 600
    assert window_text(None, "own", None) == "own"


def test_a_session_is_indexed_in_its_language_and_unknown_ones_fall_back_to_simple():
    def session(*texts):
        return [Message("s", i, "ann", "user" if i % 2 == 0 else "assistant", t, T0, "h", "f", i)
                for i, t in enumerate(texts)]
    assert {t.language for t in build_turns(session("Ich wohne jetzt in Berlin und arbeite bei der Bahn",
                                                    "Das ist schön, wie gefällt es dir?"), [])} == {"german"}
    assert {t.language for t in build_turns(session("我住在上海", "好的"), [])} == {"simple"}
    assert text_search_config("ja") == text_search_config("xx") == "simple"
    assert text_search_config("en") == "english" and text_search_config("es") == "spanish"
    rows = build_turns(session("one", "two", "three") + [Message("s", 9, "ann", "system", "sys", T0, "h", "f", 9)], [])
    assert [(t.seq, t.pos) for t in rows] == [(0, 0), (1, 1), (2, 2)]  # system messages are no turn
    # a new neighbour changes a turn's window (its embedding is made again), not its content
    grown = build_turns(session("one", "two", "three", "four"), [])
    assert grown[2].content_hash == rows[2].content_hash and grown[2].window_hash != rows[2].window_hash
    assert grown[1].window_hash == rows[1].window_hash


NOW = datetime(2026, 10, 14, 15, tzinfo=UTC)


@pytest.mark.parametrize("question, since, until", [
    ("What did I plan in May?", "2026-05-01", "2026-06-01"),
    ("in November", "2025-11-01", "2025-12-01"),  # the latest November not after now
    ("what happened last week", "2026-10-05", "2026-10-12"),
    ("two years ago", "2024-04-15", "2025-04-15"),
    ("3 days ago", "2026-10-11", "2026-10-12"),
    ("during 2025", "2025-01-01", "2026-01-01"),
    ("last month", "2026-09-01", "2026-10-01"),
    ("yesterday", "2026-10-13", "2026-10-14"),
    ("March 2025", "2025-03-01", "2025-04-01"),
])
def test_times_named_in_questions(question, since, until):
    found = time_range(question, NOW)
    assert (found.since.date().isoformat(), found.until.date().isoformat()) == (since, until)


@pytest.mark.parametrize("question", ["may I ask which port?", "when did I move?", "jan said hi", "port 2025x"])
def test_no_time_is_read_where_none_is_named(question):
    assert time_range(question, NOW) is None


def test_an_excerpt_is_outdated_only_by_a_newer_statement_about_what_its_turns_said():
    from memory_pipelines.search import MemoryHit, outdated_by

    then, later = datetime(2026, 10, 2, 10, tzinfo=UTC), datetime(2026, 10, 9, 8, tzinfo=UTC)
    hit = MemoryHit("raw", "User: let's run ledger-api on port 8080. Tool: port: 5432 in config.toml", "s-2", then,
                    1.0, user_id="bob", start_seq=27, end_seq=37)
    items = [{"session_id": "s-2", "seq": 28, "key": "config_database_url", "value": "postgresql://db:5432"},
             {"session_id": "s-2", "seq": 30, "key": "ledger-api_port", "value": "8080"},
             {"session_id": "s-2", "seq": 40, "key": "config_port", "value": "3000"},  # a turn it does not hold
             {"session_id": "s-9", "seq": 30, "key": "config_host", "value": "0.0.0.0"}]  # another session
    facts = {("bob", "config_database_url"): {"key": "config_database_url", "value": "postgresql://db:5432",
                                              "last_verified_at": later},  # the same value: not replaced
             ("bob", "config_port"): {"key": "config_port", "value": "9090", "last_verified_at": later},
             ("bob", "config_host"): {"key": "config_host", "value": "127.0.0.1", "last_verified_at": later}}
    assert outdated_by(hit, items, [], facts) is None  # near misses: same session, other subjects
    facts[("bob", "ledger_api_port")] = {"key": "ledger_api_port", "value": "9090", "last_verified_at": later}
    assert outdated_by(hit, items, [], facts) == "ledger_api_port: 9090"
    # one that names the new value states the change: current
    assert outdated_by(replace(hit, text=hit.text + " then 9090"), items, [], facts) is None
    closed = [{"session_id": "s-2", "seq_start": 30, "seq_end": 30, "subject": "ledger-api", "relation": "listens_on",
               "newer_object": "9090", "valid_until": later + timedelta(hours=1)}]
    assert outdated_by(hit, [], closed, {}) == "ledger-api listens_on 9090"
    assert outdated_by(replace(hit, start_seq=31), [], closed, {}) is None  # its turns did not say it


def test_while_other_passages_wait_a_long_one_takes_its_share_and_the_last_what_is_left():
    from memory_pipelines.passages import PASSAGE_LEAST_CHARS, PASSAGE_SHARE, fill_passages

    long = passage("x" * 900, "the port is 8443", "y" * 900, best=1)
    short = replace(passage("we settled on port 9090"), session_id="s2")
    budget = Budget(1500)
    first, second = fill_passages([long, short], budget)
    share = max(int(1500 * PASSAGE_SHARE), PASSAGE_LEAST_CHARS)
    assert len(first.text) <= share and "8443" in first.text  # its best turn, within its share
    assert second is short and budget.used == len(first.text) + len(short.text)
    # alone, or last, a passage takes what is left: the whole of it when that fits
    assert fill_passages([long], Budget(5000), drop_chatter=False) == [long]
    assert fill_passages([short, long], Budget(2000), drop_chatter=False)[1] == long

"""Chunking, noise rules, rules summaries and the summary fold (pure, rules back end)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.llm import ModelConfig, build_backend
from memory_pipelines.records import Message, Summary, TimeWindow
from memory_pipelines.rules.noise import judge_segments
from memory_pipelines.rules.summary import overturned_entries, relevant_entries, summarize
from memory_pipelines.rules.text import _WORD, detect_language, words
from memory_pipelines.core.noise_filter import MAX_SEGMENTS_PER_CALL, pack_sessions
from memory_pipelines.core.noise_filter import cut_segments, judge_sessions
from memory_pipelines.core.summary_fold import (
    Day, DiscardFrom, FoldPlan, SummaryState, VersionBuilt, VersionsReused, chunk_messages, fold_session, rendered_length,
)
from tests.helpers import scan_location

T0 = datetime(2026, 10, 1, 9, tzinfo=UTC)
RULES = build_backend(ModelConfig())


def msg(seq, role, content, minutes=None, session="s1", **extra) -> Message:
    return Message(session_id=session, seq=seq, user_id="u1", role=role, content=content,
                   ts=T0 + timedelta(minutes=seq if minutes is None else minutes), content_hash=f"h{seq}:{content[:20]}",
                   source_file="f", source_line=seq, **extra)


def conversation(*turns: tuple[str, str]) -> list[Message]:
    return [msg(i, role, text) for i, (role, text) in enumerate(turns, start=1)]


# --- chunking ---------------------------------------------------------------------------

def test_chunks_respect_the_bound_and_never_end_on_a_user_message():
    messages = []
    for i in range(1, 200, 2):
        messages.append(msg(i, "user", f"question {i} " + "q" * (300 * (i % 7))))
        messages.append(msg(i + 1, "assistant", f"answer {i} " + "a" * (900 * (i % 5))))
    chunks, leftover = chunk_messages(messages, 32_000)
    assert len(chunks) > 3 and leftover == ()
    for chunk in chunks:
        assert sum(rendered_length(m) for m in chunk) <= 32_000
        assert chunk[-1].role != "user"
    assert [m.seq for c in chunks for m in c] == [m.seq for m in messages]


def test_trailing_user_messages_wait_for_their_reply():
    chunks, leftover = chunk_messages(conversation(("user", "a"), ("assistant", "b"), ("user", "c")))
    assert [m.content for c in chunks for m in c] == ["a", "b"]
    assert [m.content for m in leftover] == ["c"]


def test_a_huge_message_is_cut_in_the_middle_and_still_pairs_with_its_reply():
    chunks, _ = chunk_messages(conversation(("user", "x" * 100_000 + "TAIL"), ("assistant", "ok")), 32_000)
    assert len(chunks) == 1
    user = chunks[0][0]
    assert user.content.endswith("TAIL") and "characters elided" in user.content
    assert sum(rendered_length(m) for m in chunks[0]) <= 32_000


def test_the_long_sample_session_is_cut_into_several_bounded_chunks():
    window = TimeWindow(datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC))
    session = [m for m in scan_location(SAMPLE_TRANSCRIPTS, window).messages if m.session_id == "s-dmitri-0003"]
    chunks, _ = chunk_messages(sorted(session, key=lambda m: m.seq), 32_000)
    assert len(chunks) >= 2
    assert all(c[-1].role != "user" and sum(rendered_length(m) for m in c) <= 32_000 for c in chunks)


# --- noise ------------------------------------------------------------------------------

@pytest.mark.parametrize("turns, reasons", [
    ([("user", "hi"), ("assistant", "Hello!"), ("user", "Deploy the api"), ("assistant", "Deployed.")],
     ["greeting", None]),
    ([("user", "Guten Morgen!"), ("assistant", "Morgen!"), ("user", "Wie spät?"), ("assistant", "9 Uhr")],
     ["greeting", None]),
    ([("user", "Run the tests"), ("assistant", "12 passed"), ("user", "thanks, that's all"), ("assistant", "bye")],
     [None, "thanks"]),
    ([("user", "Run the tests"), ("assistant", "12 passed"), ("user", "run the tests!"), ("assistant", "12 passed")],
     [None, "repeated_request"]),
    ([("user", "Migrate the DB"), ("assistant", "Starting… [cancelled by user]"), ("user", "never mind, cancel that"),
      ("assistant", "Cancelled."), ("user", "Show the schema"), ("assistant", "users, orders")],
     ["cancelled", "cancelled", None]),
    ([("user", "Fetch the report"), ("user", "Show the schema"), ("assistant", "users, orders")],
     ["failed_no_result", None]),
    ([("user", "ありがとう"), ("assistant", "どういたしまして")], ["thanks"]),
    ([("user", "hi, can you check why the build fails on main?"), ("assistant", "It is a missing import.")], [None]),
])
def test_noise_rules(turns, reasons):
    segments = cut_segments(conversation(*turns))
    verdicts = judge_segments(segments)
    assert [v.reason if v.noise else None for v in verdicts] == reasons
    assert all(v.confidence >= 0.7 for v in verdicts if v.noise)


def test_the_last_unanswered_request_of_a_window_is_not_noise():
    verdicts = judge_segments(cut_segments(conversation(("user", "Fetch the report"))))
    assert verdicts[0].noise is False


def test_a_failed_repeat_is_not_both_dropped():
    segments = cut_segments(conversation(("user", "run the tests"), ("user", "run the tests"), ("assistant", "9 passed")))
    assert [v.noise for v in judge_segments(segments)] == [True, False]


def test_sessions_judged_together_keep_their_own_context():
    """A repeat counts within its own session only, however the sessions share a call."""
    first = cut_segments([msg(1, "user", "run the tests", session="a"), msg(2, "assistant", "9 passed", session="a")])
    second = cut_segments([msg(1, "user", "run the tests", session="b"), msg(2, "assistant", "9 passed", session="b"),
                           msg(3, "user", "run the tests", session="b"), msg(4, "assistant", "9 passed", session="b")])
    judgements = judge_sessions([first, second], RULES)
    assert [[j.verdict.reason for j in judged.judged] for judged in judgements] == [[None], [None, "repeated_request"]]
    assert judgements[0].call is judgements[1].call


def test_sessions_are_packed_into_calls_by_tokens_and_segments():
    short = [cut_segments([msg(1, "user", f"question {n}", session=f"s{n}")]) for n in range(6)]
    assert [len(b) for b in pack_sessions(short, 8000)] == [6]
    assert [len(b) for b in pack_sessions(short, 0)] == [1] * 6
    # judging reads each message's first 300 characters: 11 of them are about 800 tokens
    big = cut_segments([msg(1, "user", "x" * 4000, session="big"),
                        *(msg(i, "assistant", "y" * 4000, session="big") for i in range(2, 12))])
    assert [len(b) for b in pack_sessions([short[0], big, short[1]], 600)] == [1, 1, 1]
    long_one = cut_segments([msg(1, "user", "x" * 4000, session="long")])  # counted as its first 300
    assert [len(b) for b in pack_sessions([short[0], long_one, short[1]], 600)] == [3]
    many = cut_segments([msg(i, "user", "again?") for i in range(1, MAX_SEGMENTS_PER_CALL)])
    assert [len(b) for b in pack_sessions([many, short[0], short[1]], 10**6)] == [2, 1]


def test_sessions_share_calls_by_day_user_or_not_at_all():
    def session(name: str, user: str):
        return cut_segments([replace(msg(1, "user", f"question {name}", session=name), user_id=user)])

    sessions = [session("a1", "ann"), session("b1", "bob"), session("a2", "ann"), session("b2", "bob")]
    owners = lambda batches: [[s[0].messages[0].user_id for s in batch] for batch in batches]  # noqa: E731
    assert owners(pack_sessions(sessions, 8000)) == [["ann", "bob", "ann", "bob"]]
    # one user's sessions only, grouped by user in order of each user's first session
    assert owners(pack_sessions(sessions, 8000, "user")) == [["ann", "ann"], ["bob", "bob"]]
    assert owners(pack_sessions(sessions, 8000, "session")) == [["ann"], ["bob"], ["ann"], ["bob"]]


# --- rules summaries --------------------------------------------------------------------

def test_rules_summary_fields_and_decision_prefixes():
    summary = summarize(Summary(), conversation(
        ("user", "From now on, always write tests with pytest. Never use docker compose for this project."),
        ("assistant", "Understood. I will use pytest."),
        ("user", "What is in services/ledger-api/config.toml?"),
        ("assistant", "port: 8080"),
    ), "auto")
    assert summary.key_decisions == (
        "Do: From now on, always write tests with pytest.", "Don't: Never use docker compose for this project.")
    assert summary.current_discussion.startswith("What is in services/ledger-api/config.toml?")
    assert "services/ledger-api/config.toml" in summary.keys
    assert summary.language == "en"


def test_at_most_eight_decisions_the_newest_kept():
    turns = [t for i in range(12) for t in (("user", f"From now on always use tool{i}."), ("assistant", "ok"))]
    summary = summarize(Summary(), conversation(*turns), "en")
    assert len(summary.key_decisions) == 8
    assert summary.key_decisions[0].endswith("tool4.") and summary.key_decisions[-1].endswith("tool11.")


def test_a_changed_port_overturns_the_old_decision():
    before = summarize(Summary(), conversation(("user", "Let's run ledger-api on port 8080."), ("assistant", "Done.")), "en")
    change = conversation(("user", "Port 8080 clashes with the proxy, switch ledger-api to port 9090 from now on."),
                          ("assistant", "Switched."))
    assert overturned_entries(before, change) == {"Do: Let's run ledger-api on port 8080."}
    unrelated = conversation(("user", "Switch the editor theme to dark."), ("assistant", "Done."))
    assert overturned_entries(before, unrelated) == set()


@pytest.mark.parametrize("text, code", [
    ("Bitte antworte immer auf Deutsch, das ist mir wichtig.", "de"),
    ("¿Cómo despliego la app en Fly.io con la base de datos?", "es"),
    ("レシピのデータベースを決めたいです", "ja"),
    ("請幫我看一下這個查詢為什麼很慢", "zh"),
    ("Please check the deploy log for errors.", "en"),
])
def test_language_detection(text, code):
    assert detect_language([text]) == code


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.characters(max_codepoint=0x7F)) | st.text())
def test_words_are_each_word_casefolded(text):
    # ASCII text takes a shortcut (one lower() for the whole text): the same words
    assert words(text) == [w.casefold() for w in _WORD.findall(text)]


def test_relevance_keeps_matching_entries_and_general_rules():
    summary = Summary(key_decisions=("Do: answer in German", "Do: run ledger-api on port 9090"),
                      past_discussions=("pandas decimal commas",), current_discussion="deploy to fly.io")
    picked = relevant_entries(summary, "which port does ledger-api use?")
    assert picked.key_decisions == ("Do: answer in German", "Do: run ledger-api on port 9090")
    assert picked.past_discussions == () and picked.current_discussion == ""
    assert relevant_entries(Summary(past_discussions=("pandas",)), "weather tomorrow") is None


# --- the fold ---------------------------------------------------------------------------

def _days(*keys):
    return [Day(k, datetime.fromisoformat(k).replace(tzinfo=UTC) + timedelta(days=1)) for k in keys]


def _two_day_session():
    day1 = [msg(1, "user", "Let's run ledger-api on port 8080.", 0), msg(2, "assistant", "Done.", 1)]
    day2 = [msg(3, "user", "Switch ledger-api to port 9090 from now on, 8080 clashes.", 24 * 60),
            msg(4, "assistant", "Switched.", 24 * 60 + 1)]
    return day1 + day2


def test_fold_builds_one_version_per_chunk_and_moves_the_cursor():
    plan = FoldPlan("s1", "u1", SummaryState(), _days("2026-10-01", "2026-10-02"), _two_day_session())
    events = list(fold_session(plan, RULES, RULES, "en"))
    built = [e.version for e in events if isinstance(e, VersionBuilt)]
    assert [(v.partition_key, v.version, v.cursor_seq) for v in built] == [("2026-10-01", 1, 2), ("2026-10-02", 2, 4)]
    assert built[1].trimmed == ("Do: Let's run ledger-api on port 8080.",)
    assert built[1].summary.key_decisions == ("Do: Switch ledger-api to port 9090 from now on, 8080 clashes.",)
    # the decision step and the summary each cost one (rules) call on day 2
    assert [c.purpose for c in events[1].calls] == ["find_overturned", "distill"]


def test_fold_reuses_versions_whose_inputs_did_not_change_and_rebuilds_after_a_change():
    messages = _two_day_session()
    plan = FoldPlan("s1", "u1", SummaryState(), _days("2026-10-01", "2026-10-02"), messages)
    first = [e.version for e in fold_session(plan, RULES, RULES, "en") if isinstance(e, VersionBuilt)]
    from memory_pipelines.core.summary_fold import StoredVersion
    stored = [StoredVersion(v.version, v.partition_key, v.step, v.step_count, v.fingerprint, v.summary,
                            v.cursor_seq, v.cursor_ts) for v in first]
    again = list(fold_session(FoldPlan("s1", "u1", SummaryState(), plan.days, messages, stored), RULES, RULES, "en"))
    assert all(isinstance(e, VersionsReused) for e in again) and len(again) == 2
    # day 1's segment judged noise now: day 1 and everything after it are rebuilt
    changed_days = [Day("2026-10-01", plan.days[0].end, frozenset({1, 2})), plan.days[1]]
    rebuilt = list(fold_session(FoldPlan("s1", "u1", SummaryState(), changed_days, messages, stored), RULES, RULES, "en"))
    assert isinstance(rebuilt[0], DiscardFrom) and (rebuilt[0].partition_key, rebuilt[0].step) == ("2026-10-01", 0)
    built = [e.version for e in rebuilt if isinstance(e, VersionBuilt)]
    assert [(v.partition_key, v.kind) for v in built] == [("2026-10-01", "trim"), ("2026-10-02", "chunk")]
    assert built[1].summary.key_decisions == ("Do: Switch ledger-api to port 9090 from now on, 8080 clashes.",)


def test_cursor_only_when_a_summary_has_no_cursor():
    legacy = SummaryState(Summary(current_discussion="imported"), None, None, 0, "legacy")
    plan = FoldPlan("s1", "u1", legacy, _days("2026-10-01", "2026-10-02"), _two_day_session())
    events = list(fold_session(plan, RULES, RULES, "en"))
    first = events[0]
    assert first.version.kind == "cursor_only" and first.calls == () and first.version.cursor_seq == 2
    assert first.version.summary.current_discussion == "imported"


def test_all_noise_saves_the_summary_and_cursor_without_a_call():
    messages = conversation(("user", "hi"), ("assistant", "Hello!"))
    plan = FoldPlan("s1", "u1", SummaryState(), [Day("2026-10-01", T0 + timedelta(days=1), frozenset({1, 2}))], messages)
    [event] = list(fold_session(plan, RULES, RULES, "en"))
    assert event.version.kind == "trim" and event.calls == () and event.version.cursor_seq == 2

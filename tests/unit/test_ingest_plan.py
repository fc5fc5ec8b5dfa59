"""plan_ingest: what a scan adds to the archive (pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from memory_pipelines.ingest import plan_ingest
from memory_pipelines.records import ForkPoint, Message, QuarantineReason, StoredMessage, TimeWindow, TranscriptScan

WINDOW = TimeWindow(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 2, tzinfo=UTC))


def _m(seq, content="hello", user="u1", session="s1", line=None) -> Message:
    return Message(session_id=session, seq=seq, user_id=user, role="user", content=content,
                   ts=datetime(2026, 10, 1, 10, seq, tzinfo=UTC), content_hash=f"{user}:{content}",
                   source_file="f.jsonl", source_line=line or seq)


def _scan(*messages) -> TranscriptScan:
    return TranscriptScan(WINDOW, tuple(messages), (), files=1)


def test_new_messages_pass_through():
    plan = plan_ingest(_scan(_m(1), _m(2)), {}, {})
    assert [m.seq for m in plan.new] == [1, 2] and plan.duplicates == 0 and not plan.quarantined


def test_resent_identical_message_is_a_duplicate_not_a_conflict():
    stored = {("s1", 1): StoredMessage("u1:hello", "u1")}
    plan = plan_ingest(_scan(_m(1), _m(1, line=9)), stored, {"s1": "u1"})
    assert plan.new == () and plan.duplicates == 2 and plan.read == 2


def test_same_key_with_other_content_is_quarantined_first_one_wins():
    plan = plan_ingest(_scan(_m(1, "a", line=1), _m(1, "b", line=2), _m(1, "a", line=3)), {}, {})
    assert [m.content for m in plan.new] == ["a"]
    assert plan.duplicates == 1
    [conflict] = plan.quarantined
    assert conflict.reason is QuarantineReason.CONFLICTING_DUPLICATE and conflict.source_line == 2


def test_conflict_against_the_archive():
    plan = plan_ingest(_scan(_m(1, "changed")), {("s1", 1): StoredMessage("u1:hello", "u1")}, {"s1": "u1"})
    assert plan.new == () and plan.quarantined[0].reason is QuarantineReason.CONFLICTING_DUPLICATE


def test_a_session_cannot_change_owner():
    plan = plan_ingest(_scan(_m(2, user="eve"), _m(3)), {}, {"s1": "u1"})
    assert [m.seq for m in plan.new] == [3]
    [refused] = plan.quarantined
    assert refused.reason is QuarantineReason.USER_MISMATCH and "'u1'" in refused.detail


def test_first_user_of_a_new_session_owns_it_within_a_batch():
    plan = plan_ingest(_scan(_m(1, user="u1"), _m(2, user="eve")), {}, {})
    assert [m.user_id for m in plan.new] == ["u1"]
    assert plan.quarantined[0].reason is QuarantineReason.USER_MISMATCH


def test_counts_add_up():
    plan = plan_ingest(_scan(_m(1), _m(1), _m(1, "x"), _m(2, user="eve"), _m(3)), {}, {})
    assert plan.read == 5 == len(plan.new) + plan.duplicates + len(plan.quarantined)


def test_forgotten_users_and_sessions_are_skipped_and_counted():
    forgotten = frozenset({("u1", "s1"), ("eve", "")})
    plan = plan_ingest(_scan(_m(1), _m(2, user="eve", session="s9"), _m(3, session="s2")), {}, {}, forgotten)
    assert [(m.session_id, m.seq) for m in plan.new] == [("s2", 3)]
    assert plan.forgotten == 2 and plan.read == 3


def _fork(seq, session="f1", parent="s1", at=3, user="u1", content="branch") -> Message:
    return replace(_m(seq, content, user=user, session=session), parent_session_id=parent, fork_seq=at)


def test_a_forks_records_declare_its_point_once_and_come_after_it():
    plan = plan_ingest(_scan(_m(1), _m(2), _fork(4), _fork(5), replace(_fork(6), parent_session_id=None,
                                                                       fork_seq=None)), {}, {})
    assert [m.seq for m in plan.new] == [1, 2, 4, 5, 6] and not plan.quarantined
    assert plan.forks == (ForkPoint("f1", "s1", 3, "u1"),)


def test_a_fork_point_that_cannot_stand_is_quarantined_with_what_to_fix():
    stored_fork = {"f1": ForkPoint("f1", "s1", 3, "u1")}
    cases = [
        ((_fork(3),), {}, {"s1": "u1"}, {}, QuarantineReason.FORK_MISMATCH, "own turns start at seq 4"),
        ((_fork(5, at=4),), {}, {"s1": "u1"}, stored_fork, QuarantineReason.FORK_MISMATCH, "the record says s1 after seq 4"),
        ((_fork(5, parent="nope"),), {}, {}, {}, QuarantineReason.FORK_MISMATCH, "parent session nope is not in the archive"),
        ((_fork(5, parent="f0"),), {}, {"f0": "u1"}, {"f0": ForkPoint("f0", "s0", 1, "u1")},
         QuarantineReason.FORK_MISMATCH, "f0 is itself a fork"),
        ((_fork(5, parent="f1", session="f1"),), {}, {}, {}, QuarantineReason.FORK_MISMATCH, "names itself"),
        ((_fork(5, user="u2"),), {}, {"s1": "u1"}, {}, QuarantineReason.USER_MISMATCH, "forks s1 of user 'u1'"),
        ((_fork(5, session="s2"),), {("s2", 1): StoredMessage("x", "u1")}, {"s2": "u1", "s1": "u1"}, {},
         QuarantineReason.FORK_MISMATCH, "stored as a session of its own"),
    ]
    for messages, stored, owners, forks, reason, detail in cases:
        plan = plan_ingest(_scan(*messages), stored, owners, forks=forks)
        [refused] = plan.quarantined
        assert plan.new == () and refused.reason is reason and detail in refused.detail, (detail, refused.detail)


def test_a_parent_in_the_same_batch_is_found_in_any_file_order():
    plan = plan_ingest(_scan(_fork(4), _m(1), _m(2)), {}, {})
    assert [m.session_id for m in plan.new] == ["f1", "s1", "s1"] and not plan.quarantined


def test_turns_a_replace_merge_set_aside_stay_aside_and_are_counted():
    plan = plan_ingest(_scan(_m(1), _m(2, "later")), {("s1", 1): StoredMessage("u1:hello", "u1")}, {"s1": "u1"},
                       superseded=frozenset({("s1", 2, "u1:later")}))
    assert plan.new == () and plan.superseded == 1 and plan.duplicates == 1 and plan.read == 2

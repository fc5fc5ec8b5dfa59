"""plan_ingest: what a scan adds to the archive (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_pipelines.ingest import plan_ingest
from memory_pipelines.records import Message, QuarantineReason, StoredMessage, TimeWindow, TranscriptScan

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

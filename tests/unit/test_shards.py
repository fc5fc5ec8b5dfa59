"""User shards (pure): a stable shard per user, and the part of a scan each shard ingests."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest

from memory_pipelines.ingest import scan_of_shard
from memory_pipelines.records import Message, QuarantinedRecord, QuarantineReason, TimeWindow, TranscriptScan
from memory_pipelines.shards import ALL_USERS, Shard, ShardLayoutMismatch, shard_of

WINDOW = TimeWindow(datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 10, 2, tzinfo=UTC))
USERS = [f"user-{i}" for i in range(300)]


def _m(seq: int, user: str) -> Message:
    return Message(session_id=f"s-{user}", seq=seq, user_id=user, role="user", content="hi",
                   ts=datetime(2026, 10, 1, 10, tzinfo=UTC), content_hash=f"{user}:{seq}",
                   source_file="f.jsonl", source_line=seq)


def test_a_users_shard_is_stable_and_the_users_spread_over_every_shard():
    assert shard_of("bob", 3) == shard_of("bob", 3) == 0  # md5('bob') starts 9f9d5 -> 0x9f9d51bc % 3
    assert all(shard_of(user, 1) == 0 for user in USERS)
    spread = Counter(shard_of(user, 4) for user in USERS)
    assert set(spread) == {0, 1, 2, 3} and min(spread.values()) > 40


def test_a_shard_outside_its_count_is_refused():
    assert ALL_USERS.params == {"shard": 0, "shards": 1} and ALL_USERS.label == ""
    assert Shard(2, 3).label == "shard 2/3"
    with pytest.raises(ValueError, match="shard 3 does not exist among 3"):
        Shard(3, 3)


def test_each_shard_ingests_its_users_and_the_counts_add_up():
    refused = QuarantinedRecord(source_file="f.jsonl", source_line=99, reason=QuarantineReason.MALFORMED_JSON,
                                detail="not JSON", raw="{", raw_bytes=1)
    scan = TranscriptScan(WINDOW, tuple(_m(i, user) for i, user in enumerate(USERS[:30])), (refused,), files=1)
    parts = [scan_of_shard(scan, Shard(i, 3)) for i in range(3)]
    for index, (part, elsewhere) in enumerate(parts):
        assert all(shard_of(m.user_id, 3) == index for m in part.messages)
        assert part.read + elsewhere == scan.read
    # every record lands in exactly one shard; a refused record, which names no user, on shard 0
    assert sorted(m.source_line for part, _ in parts for m in part.messages) == list(range(30))
    assert [len(part.quarantined) for part, _ in parts] == [1, 0, 0]
    assert scan_of_shard(scan, ALL_USERS) == (scan, 0)


def test_a_layout_mismatch_names_both_counts_and_the_fix():
    error = ShardLayoutMismatch(stored=3, configured=4)
    assert (error.stored, error.configured) == (3, 4)
    assert "MEMORY_SHARDS is 4" in str(error) and "3 shard(s)" in str(error)
    assert "memory-pipelines reshard --shards 4" in str(error)

"""The stages' shared pieces: typed counts merge field by field and come back from their
metadata, a window's days, progress."""

import json
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, timedelta

import pytest

from memory_pipelines.stages.common import (
    PROGRESS_MIN_DAYS, Counts, StageReport, Window, map_in_order, map_parallel, progress_bars,
)
from memory_pipelines.stages.transcripts import TranscriptCounts


@dataclass
class ExampleCounts(Counts):
    sessions: int = 0
    by_reason: Counter = field(default_factory=Counter)
    as_of: str = ""


def test_counts_merge_adds_numbers_and_counters_and_keeps_the_newer_value():
    first = StageReport(ExampleCounts(2, Counter(greeting=1), "2026-01-01"), users={"u1"})
    first.merge(StageReport(ExampleCounts(3, Counter(greeting=2, thanks=1), ""), users={"u2"}))
    first.merge(StageReport(ExampleCounts(0, Counter(), "2026-01-02")))
    assert first.counts == ExampleCounts(5, Counter(greeting=3, thanks=1), "2026-01-02")
    assert first.users == {"u1", "u2"}
    assert first.counts.metadata() == {"sessions": 5, "by_reason": {"greeting": 3, "thanks": 1},
                                       "as_of": "2026-01-02"}
    assert first.counts.headline() == "sessions 5"


def test_counts_come_back_from_their_metadata_with_counters_as_counters():
    counts = TranscriptCounts(partition_window="2026-01-01", read=7, quarantined=2, refusals_resolved=1,
                              quarantined_by_reason=Counter(bad_json=2, too_large=1),
                              events_skipped=Counter(snapshot=3), files_skipped_first=["a.jsonl"],
                              table_rows={"messages": 5})
    # as a materialization stores them: JSON, beside keys that are no count
    stored = json.loads(json.dumps({"partitions": "2026-01-01", **counts.metadata(), "preview": "| |"}))
    back = TranscriptCounts.from_metadata(stored)
    assert back == counts
    assert type(back.quarantined_by_reason) is Counter and type(back.events_skipped) is Counter
    assert back.metadata() == counts.metadata()
    assert ExampleCounts.from_metadata({"sessions": 2, "by_reason": {}, "as_of": ""}) == ExampleCounts(2)


def _keys(days: int) -> tuple[str, ...]:
    return tuple((date(2025, 1, 1) + timedelta(days=i)).isoformat() for i in range(days))


def test_a_window_names_its_range_and_yields_utc_days_in_order():
    window = Window(_keys(3), "run")
    days = list(window.days("stage"))
    assert [k for k, _ in days] == ["2025-01-01", "2025-01-02", "2025-01-03"]
    assert days[1][1].start == window.span.start + timedelta(days=1)
    assert window.label == "2025-01-01..2025-01-03" and Window(_keys(1), "r").label == "2025-01-01"
    with pytest.raises(ValueError):
        Window((), "run")


def test_a_long_range_advances_a_bar_per_stage_a_short_one_none():
    opened: list[tuple[str, int]] = []
    advanced: list[str] = []

    @contextmanager
    def bars(stage: str, days: int):
        opened.append((stage, days))
        yield lambda: advanced.append(stage)

    with progress_bars(bars):
        list(Window(_keys(PROGRESS_MIN_DAYS - 1), "r").days("short"))
        list(Window(_keys(PROGRESS_MIN_DAYS), "r").days("long"))
    list(Window(_keys(PROGRESS_MIN_DAYS), "r").days("after"))  # outside: no bars
    assert opened == [("long", PROGRESS_MIN_DAYS)]
    assert advanced == ["long"] * PROGRESS_MIN_DAYS


def test_a_stage_visits_only_the_days_with_work_and_its_bar_still_covers_the_range():
    advanced: list[str] = []

    @contextmanager
    def bars(stage: str, days: int):
        yield lambda: advanced.append(stage)

    keys = _keys(PROGRESS_MIN_DAYS)
    with progress_bars(bars):
        visited = [k for k, _ in Window(keys, "r").days("sparse", only={keys[3], keys[0]})]
    assert visited == [keys[0], keys[3]]  # in order, whatever order `only` has
    assert advanced == ["sparse"] * PROGRESS_MIN_DAYS
    assert [k for k, _ in Window(keys[:3], "r").days("none", only=set())] == []


def test_sessions_are_batched_and_a_token_budget_keeps_batches_to_the_calls_in_flight():
    from memory_pipelines.llm import ModelConfig, build_backend
    from memory_pipelines.stages.common import BATCH_SESSIONS, session_batches

    items = list(range(BATCH_SESSIONS * 2 + 1))
    assert [len(b) for b in session_batches(items)] == [BATCH_SESSIONS, BATCH_SESSIONS, 1]
    free = build_backend(ModelConfig())
    assert [len(b) for b in session_batches(items, free, 4)] == [BATCH_SESSIONS, BATCH_SESSIONS, 1]
    budgeted = build_backend(ModelConfig(token_budget=1000))
    assert {len(b) for b in session_batches(items, budgeted, 3)} == {3} | ({len(items) % 3} - {0})
    assert sum(session_batches(items, budgeted, 3), []) == items


def test_map_in_order_gives_each_result_before_later_work_begins_one_at_a_time():
    """What lets a stage store a batch's judgement while the next is judged: results come as
    they are done, in order, not all at the end."""
    events = []

    def work(item: int) -> int:
        events.append(f"work {item}")
        return item * 10

    for result in map_in_order([1, 2, 3], work, concurrency=1):
        events.append(f"got {result}")
    assert events == ["work 1", "got 10", "work 2", "got 20", "work 3", "got 30"]
    assert map_parallel([3, 1, 2], work, concurrency=2) == [30, 10, 20]

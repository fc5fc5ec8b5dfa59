"""The backfill benchmark's figures from two runs' timings (pure)."""
from memory_pipelines.bench.distill import BackfillBench, DistillBench, backfill_markdown


def _run(days: int, seconds: float, bookkeeping: float) -> DistillBench:
    return DistillBench(backend="rules (offline)", users=2, sessions=4, messages=80, days=days, days_with_data=days,
                        seconds=seconds, peak_rss_mb=100.0, stage_seconds={}, table_bytes={}, usage={},
                        summarized_session_days=0, bookkeeping_seconds=bookkeeping)


def test_the_ratio_without_bookkeeping_divides_what_the_stages_cost_beyond_it():
    result = BackfillBench(short=_run(3, 4.0, 1.0), long=_run(12, 9.0, 3.0))
    assert result.ratio == 9.0 / 4.0
    assert result.ratio_without_bookkeeping == 6.0 / 3.0
    assert "without Dagster's bookkeeping: 2.00x" in backfill_markdown(result)


def test_no_ratio_is_read_when_a_ranges_bookkeeping_took_as_long_as_the_range():
    # timing noise on a busy machine with little data: the idle graph timed above the real run
    result = BackfillBench(short=_run(3, 2.0, 2.5), long=_run(12, 9.0, 3.0))
    assert result.ratio_without_bookkeeping is None
    assert result.to_json()["ratio_without_bookkeeping"] is None
    assert "without Dagster's bookkeeping: not measurable" in backfill_markdown(result)

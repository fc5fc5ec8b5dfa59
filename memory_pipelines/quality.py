"""Data-quality expectations run with great-expectations over the rows a run wrote.

Expectations are plain tuples so that stages can declare them without importing
great-expectations (a 3-second import, paid once per process when a check first runs):

    ("not_null", column) · ("between", column, low, high) · ("true", column)
    · ("unique", (column, ...))
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

_context_lock = threading.Lock()
_context = None


@dataclass(frozen=True)
class QualityResult:
    passed: bool
    rows: int
    summary: str
    failures: tuple[str, ...]


def _gx_context():
    global _context
    with _context_lock:
        if _context is None:
            import great_expectations as gx
            from great_expectations.data_context.types.base import ProgressBarsConfig

            _context = gx.get_context(mode="ephemeral")
            _context.variables.progress_bars = ProgressBarsConfig(globally=False)
        return _context


def _expectation(spec: tuple, index: int):
    import great_expectations as gx

    kind, *args = spec
    meta = {"index": index}  # results come back in another order: this pairs them with specs
    if kind == "not_null":
        return gx.expectations.ExpectColumnValuesToNotBeNull(column=args[0], meta=meta)
    if kind == "between":
        return gx.expectations.ExpectColumnValuesToBeBetween(column=args[0], min_value=args[1], max_value=args[2],
                                                             meta=meta)
    if kind == "true":
        return gx.expectations.ExpectColumnValuesToBeInSet(column=args[0], value_set=[True], meta=meta)
    if kind == "unique":
        return gx.expectations.ExpectCompoundColumnsToBeUnique(column_list=list(args[0]), meta=meta)
    raise ValueError(f"unknown expectation {kind!r}")


def describe(spec: tuple) -> str:
    kind, *args = spec
    return {
        "not_null": lambda: f"{args[0]} is never null",
        "between": lambda: f"{args[0]} between {args[1]} and {args[2]}",
        "true": lambda: f"{args[0]} holds",
        "unique": lambda: f"({', '.join(args[0])}) is unique",
    }[kind]()


def validate_frame(name: str, frame: pd.DataFrame, specs: Sequence[tuple]) -> QualityResult:
    """Run the expectations over `frame` (the rows in scope of one check)."""
    if frame.empty:
        return QualityResult(True, 0, f"{name}: no rows in scope", ())
    import great_expectations as gx

    context = _gx_context()
    with _context_lock:
        source = context.data_sources.add_or_update_pandas("memory_pipelines")
        try:
            asset = source.get_asset(name)
        except LookupError:
            asset = source.add_dataframe_asset(name)
        try:
            batch_definition = asset.get_batch_definition("all")
        except (KeyError, LookupError):
            batch_definition = asset.add_batch_definition_whole_dataframe("all")
    suite = gx.ExpectationSuite(name=name, expectations=[_expectation(s, i) for i, s in enumerate(specs)])
    outcome = batch_definition.get_batch(batch_parameters={"dataframe": frame}).validate(suite)
    by_index = {r.expectation_config.meta["index"]: r for r in outcome.results}
    failures = []
    for index, spec in enumerate(specs):
        result = by_index[index]
        if not result.success:
            detail: Any = result.result.get("unexpected_count")
            sample = result.result.get("partial_unexpected_list") or []
            error = (result.exception_info or {}).get("exception_message")
            failures.append(f"{describe(spec)}: " + (f"error {error}" if error else
                                                     f"{detail} of {len(frame)} rows fail, e.g. {sample[:3]}"))
    passed = len(specs) - len(failures)
    summary = f"{name}: {passed}/{len(specs)} expectations met over {len(frame)} rows" + (
        "" if not failures else "; " + "; ".join(failures))
    return QualityResult(not failures, len(frame), summary, tuple(failures))

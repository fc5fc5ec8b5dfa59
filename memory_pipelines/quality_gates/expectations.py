"""Data-quality expectations run with great-expectations over the rows a run wrote.

Expectations are plain tuples so that stages can declare them without importing
great-expectations (a 3-second import, paid once per process when a check first runs):

    ("not_null", column) · ("between", column, low, high) (high None: no upper bound)
    · ("true", column) · ("in_set", column, values) · ("equal", column, other_column)
    · ("unique", (column, ...)) · ("json_schema", column, schema) (the column holds JSON text)
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import pandas as pd

from memory_pipelines.json_schemas import JsonSchema

_context_lock = threading.Lock()
_context = None
_checks_batch = None
EXAMPLES = 3  # failing rows named in a summary, per expectation
EXAMPLE_CHARS = 80


@dataclass(frozen=True)
class QualityResult:
    passed: bool
    rows: int
    summary: str
    failures: tuple[str, ...]


def _batch_definition():
    """The whole-dataframe batch definition every check's frame is validated through,
    registered once per process: each registration rewrites the context's configuration,
    about 0.35 s, so one per check was most of what the checks cost."""
    global _context, _checks_batch
    with _context_lock:
        if _context is None:
            import great_expectations as gx
            from great_expectations.data_context.types.base import ProgressBarsConfig

            # that module sets its own logger to INFO: every run would print where GE put a temp folder
            logging.getLogger("great_expectations.data_context.types.base").setLevel(logging.WARNING)
            _context = gx.get_context(mode="ephemeral")
            _context.variables.progress_bars = ProgressBarsConfig(globally=False)
            _context.data_sources.add_pandas("memory_pipelines")
            _checks_batch = (_context.data_sources.get("memory_pipelines").add_dataframe_asset("checks")
                             .add_batch_definition_whole_dataframe("all"))
        return _checks_batch


def prepare() -> None:
    """Import great-expectations and register the batch definition now rather than at the
    first check (a benchmark's set-up, outside its timing: every process pays it once)."""
    _batch_definition()


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
    if kind == "in_set":
        return gx.expectations.ExpectColumnValuesToBeInSet(column=args[0], value_set=list(args[1]), meta=meta)
    if kind == "equal":
        return gx.expectations.ExpectColumnPairValuesToBeEqual(column_A=args[0], column_B=args[1], meta=meta)
    if kind == "unique" and len(args[0]) == 1:  # the compound expectation wants two columns or more
        return gx.expectations.ExpectColumnValuesToBeUnique(column=args[0][0], meta=meta)
    if kind == "unique":
        return gx.expectations.ExpectCompoundColumnsToBeUnique(column_list=list(args[0]), meta=meta)
    if kind == "json_schema":
        return gx.expectations.ExpectColumnValuesToBeNull(column=_schema_error_column(args[0]), meta=meta)
    raise ValueError(f"unknown expectation {kind!r}")


def _schema_error_column(column: str) -> str:
    return f"{column} schema error"


@lru_cache(maxsize=32)
def _schema_validator(schema_json: str) -> JsonSchema:
    return JsonSchema(json.loads(schema_json))


def _schema_error(validator: JsonSchema, text: str | None) -> str | None:
    if text is None:
        return None  # nulls are not_null's to judge, as in every other expectation
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        return f"not JSON: {exc}"
    error = validator.first_error(value)
    return None if error is None else error.message


def _with_schema_errors(frame: pd.DataFrame, specs: Sequence[tuple]) -> pd.DataFrame:
    """Each JSON-shape expectation's first error per row, as a column its expectation wants
    null. great-expectations' own ExpectColumnValuesToMatchJsonSchema calls
    jsonschema.validate per row, which checks the schema itself every time (about 2.4 ms a
    row); a validator compiled once per schema takes microseconds."""
    errors = {}
    for kind, *args in specs:
        if kind == "json_schema":
            validator = _schema_validator(json.dumps(args[1], sort_keys=True))
            errors[_schema_error_column(args[0])] = [_schema_error(validator, text) for text in frame[args[0]]]
    return frame.assign(**errors) if errors else frame


def describe(spec: tuple) -> str:
    kind, *args = spec
    return {
        "not_null": lambda: f"{args[0]} is never null",
        "between": lambda: (f"{args[0]} >= {args[1]}" if args[2] is None
                            else f"{args[0]} between {args[1]} and {args[2]}"),
        "true": lambda: f"{args[0]} holds",
        "in_set": lambda: f"{args[0]} in {{{', '.join(map(str, args[1]))}}}",
        "equal": lambda: f"{args[0]} equals {args[1]}",
        "unique": lambda: f"({', '.join(args[0])}) is unique",
        "json_schema": lambda: f"{args[0]} has the expected JSON shape",
    }[kind]()


def _plain(value: Any) -> Any:
    """numpy scalars and NaN as the Python values a reader expects."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and math.isnan(value) else value


def _example(spec: tuple, row: dict, key: Sequence[str]) -> str:
    """One failing row: its key, then what failed (for a JSON shape, why)."""
    label = "/".join(str(_plain(row[k])) for k in key)
    if spec[0] == "json_schema":
        detail = row[_schema_error_column(spec[1])]
    elif spec[0] == "true":  # the description already says which column is false
        detail = ""
    else:
        detail = ", ".join(f"{k}={_plain(v)!r}" for k, v in row.items() if k not in key)
    detail = detail if len(detail) <= EXAMPLE_CHARS else detail[:EXAMPLE_CHARS - 1] + "…"
    return f"{label} ({detail})" if detail else label


def _results(batch, name: str, specs: dict[int, tuple], result_format) -> dict[int, Any]:
    import great_expectations as gx

    suite = gx.ExpectationSuite(name=name, expectations=[_expectation(s, i) for i, s in specs.items()])
    return {r.expectation_config.meta["index"]: r for r in batch.validate(suite, result_format=result_format).results}


def _exception_message(info: dict | None) -> str | None:
    """What went wrong inside an expectation: great-expectations gives either one
    {raised_exception, exception_message} or such a dict per metric it could not compute."""
    if not info:
        return None
    if "raised_exception" in info:
        return info.get("exception_message") if info["raised_exception"] else None
    return next((m for m in map(_exception_message, info.values()) if m), None)


@dataclass
class _Tally:
    """What one failed expectation found over the chunks validated so far."""
    unexpected: int = 0
    examples: list[str] = field(default_factory=list)
    error: str | None = None


class FrameValidation:
    """One check's expectations over its rows, given chunk by chunk (a check over a year's
    rows never holds them all); every row sharing a unique expectation's columns must come in
    one chunk. `key` names the columns that identify a row in the summary's examples."""

    def __init__(self, name: str, specs: Sequence[tuple], key: Sequence[str]) -> None:
        self.name, self.specs, self.key = name, tuple(specs), tuple(key)
        self.rows = 0
        self._failed: dict[int, _Tally] = {}

    def add(self, frame: pd.DataFrame) -> None:
        if frame.empty:
            return
        self.rows += len(frame)
        frame = _with_schema_errors(frame, self.specs)
        batch = _batch_definition().get_batch(batch_parameters={"dataframe": frame})
        # pass or fail first, at half the cost; only failed expectations run again to name their rows
        verdicts = _results(batch, self.name, dict(enumerate(self.specs)), "BOOLEAN_ONLY")
        failed = {index: spec for index, spec in enumerate(self.specs) if not verdicts[index].success}
        details = _results(batch, self.name, failed, {"result_format": "SUMMARY",
                                                      "unexpected_index_column_names": list(self.key)}) if failed else {}
        for index, spec in failed.items():
            result, tally = details[index], self._failed.setdefault(index, _Tally())
            tally.error = tally.error or _exception_message(result.exception_info)
            tally.unexpected += result.result.get("unexpected_count") or 0
            room = EXAMPLES - len(tally.examples)
            tally.examples += [_example(spec, row, self.key)
                               for row in (result.result.get("partial_unexpected_index_list") or [])[:max(room, 0)]]

    def result(self) -> QualityResult:
        if not self.rows:
            return QualityResult(True, 0, f"{self.name}: no rows in scope", ())
        failures = [f"{describe(self.specs[index])}: " + (
            f"error {tally.error}" if tally.error else
            f"{tally.unexpected} of {self.rows} rows fail, e.g. {'; '.join(tally.examples)}")
            for index, tally in sorted(self._failed.items())]
        summary = f"{self.name}: {len(self.specs) - len(failures)}/{len(self.specs)} expectations met over " \
                  f"{self.rows} rows" + ("" if not failures else "; " + "; ".join(failures))
        return QualityResult(not failures, self.rows, summary, tuple(failures))


def validate_frame(name: str, frame: pd.DataFrame, specs: Sequence[tuple], key: Sequence[str]) -> QualityResult:
    """Run the expectations over `frame` (the rows in scope of one check); `key` names the
    columns that identify a row in the summary's examples."""
    validation = FrameValidation(name, specs, key)
    validation.add(frame)
    return validation.result()

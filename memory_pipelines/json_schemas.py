"""JSON Schema validation of model answers and stored JSON, fast on the valid common case.

`jsonschema-rs` (compiled) decides whether an instance is valid; only an instance it refuses
is checked again by `jsonschema`, whose errors name the path and the rule broken (the reasons
a rejection stores and a failed check shows stay the same). The compiled validator is
stricter in places (`\\w` in a pattern is ASCII there, NaN is not a number, a Python value
JSON has no type for is refused outright): such an instance is then judged by `jsonschema`
alone, so a JSON value (as `json.loads` gives it) is accepted exactly when `jsonschema`
accepts it, at about 1/80 of the time for a valid one. (A tuple would pass as an array here,
where `jsonschema` refuses it: instances are JSON values, model answers always are.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import jsonschema
import jsonschema_rs


class JsonSchema:
    """One schema, compiled once (the schema itself checked then)."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        full = jsonschema.validators.validator_for(schema)
        full.check_schema(schema)
        self._full = full(schema)
        self._fast = jsonschema_rs.validator_for(dict(schema))

    def errors(self, instance: Any) -> Iterator[jsonschema.ValidationError]:
        """What makes `instance` invalid, in `jsonschema`'s order; nothing when it is valid."""
        try:
            valid = self._fast.is_valid(instance)
        except ValueError:  # a Python value JSON has no type for (a date, a non-text key)
            valid = False
        if not valid:
            yield from self._full.iter_errors(instance)

    def first_error(self, instance: Any) -> jsonschema.ValidationError | None:
        return next(self.errors(instance), None)


# rules whose jsonschema message repeats the whole value: a runaway answer's string or list
_SIZE_RULES = {"maxLength": "longer than {n} characters", "maxItems": "more than {n} items"}


def describe(error: jsonschema.ValidationError) -> str:
    """The rule an instance broke, without the value when that is what ran too long."""
    rule = _SIZE_RULES.get(str(error.validator))
    return rule.format(n=error.validator_value) if rule else error.message

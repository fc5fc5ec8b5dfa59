"""A model answer is accepted exactly when `jsonschema` accepts it, though the compiled
validator decides the common case; a refusal names `jsonschema`'s error."""

from __future__ import annotations

from datetime import datetime

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipelines.json_schemas import JsonSchema
from memory_pipelines.llm.prompts import ENTRY_SCHEMA, FACT_ITEM_SCHEMA, RELATION_SCHEMA

SCHEMAS = {"fact": FACT_ITEM_SCHEMA, "entry": ENTRY_SCHEMA, "relation": RELATION_SCHEMA}

# text that probes the places where the two validators' rules differ: non-ASCII word
# characters against a `\w` pattern, astral characters against a length
_TEXT = st.text(st.sampled_from("ab_-1 éß日本😀\n"), max_size=70)
_SCALAR = st.one_of(_TEXT, st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
                    st.booleans(), st.none())
_JSON = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
                     max_leaves=6)


_OF_TYPE = {"string": _TEXT, "number": st.floats(0, 1) | st.floats(allow_nan=True), "integer": st.integers(-3, 2**70),
            "boolean": st.booleans(), "null": st.none(), "array": st.lists(_TEXT, max_size=22)}


@st.composite
def _value(draw, rule: dict):
    """Mostly a value of the rule's type (or one of its enum), sometimes any JSON at all."""
    if draw(st.integers(0, 4)) == 0:
        return draw(_JSON)
    if "enum" in rule:
        return draw(st.sampled_from(rule["enum"]))
    types = rule["type"] if isinstance(rule["type"], list) else [rule["type"]]
    return draw(st.one_of(*(_OF_TYPE[t] for t in types)))


@st.composite
def _instances(draw, schema: dict) -> dict:
    keys = draw(st.lists(st.sampled_from(sorted(schema["properties"])), unique=True))
    # a required key is left out now and then
    keys = set(keys) | {key for key in schema["required"] if draw(st.integers(0, 9))}
    return {key: draw(_value(schema["properties"][key])) for key in keys}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_accepts_exactly_what_jsonschema_accepts(name, data):
    schema = SCHEMAS[name]
    instance = data.draw(_instances(schema))
    expected = next(jsonschema.Draft202012Validator(schema).iter_errors(instance), None)
    found = JsonSchema(schema).first_error(instance)
    assert (found is None) == (expected is None)
    if expected is not None:
        assert found.message == expected.message


def test_valid_and_invalid_answers_both_occur():
    # the property above is only worth something if both sides of it are reached
    schema = JsonSchema(FACT_ITEM_SCHEMA)
    assert schema.first_error({"category": "tool", "key": "editor", "value": "vim", "seq": 3}) is None
    error = schema.first_error({"category": "日本", "key": "editor", "value": float("nan"), "seq": 1.5})
    assert error is not None and "1.5" in error.message


@pytest.mark.parametrize("name, instance", [
    ("fact", {"category": "tool", "key": "editor", "value": datetime(2026, 10, 1)}),
    ("fact", {"category": "tool", "key": "editor", "value": "vim", 7: "a non-text key"}),
    ("entry", {"kind": "fact", "title": "t", "content": "c", "tags": ["a", "b"], "seq": datetime(2026, 10, 1)}),
])
def test_python_values_json_has_no_type_for_are_judged_by_jsonschema(name, instance):
    expected = next(jsonschema.Draft202012Validator(SCHEMAS[name]).iter_errors(instance), None)
    found = JsonSchema(SCHEMAS[name]).first_error(instance)
    assert (found is None) == (expected is None)
    assert found is None or found.message == expected.message

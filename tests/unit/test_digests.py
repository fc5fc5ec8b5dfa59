"""json_digest hashes exactly the text json.dumps writes, so every stored digest stays valid."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipelines import digests
from memory_pipelines.digests import COMPACT, json_digest

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
VALUES = st.recursive(SCALARS | st.datetimes(timezones=st.just(UTC)),
                      lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                      | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20)
# every set of options a digest in the project is made with
OPTIONS = [{}, {"ensure_ascii": False}, {"sort_keys": True}, {"sort_keys": True, "default": str},
           {"ensure_ascii": False, "default": str},
           {"sort_keys": True, "ensure_ascii": False, "separators": COMPACT, "default": str}]


def _holds_datetime(value) -> bool:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return any(_holds_datetime(item) for item in value)
    return isinstance(value, datetime)


def _expected(value, options) -> str:
    return hashlib.sha256(json.dumps(value, **options).encode()).hexdigest()


@settings(max_examples=300, deadline=None)
@given(value=VALUES, options=st.sampled_from(OPTIONS))
def test_a_digest_is_the_sha256_of_what_json_dumps_writes(value, options):
    if "default" not in options and _holds_datetime(value):
        with pytest.raises(TypeError):
            json_digest(value, **options)
        return
    assert json_digest(value, **options) == _expected(value, options)


def test_known_digests_do_not_move():
    # rows written before keep matching: a message's hash as the transcripts stage stored it
    fields = {"role": "user", "content": "Grüße, ß", "ts": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "n": 1.5}
    assert json_digest(fields, sort_keys=True, ensure_ascii=False, separators=COMPACT, default=str) == (
        hashlib.sha256('{"content":"Grüße, ß","n":1.5,"role":"user","ts":"2026-01-02 03:04:05+00:00"}'
                       .encode()).hexdigest())


def test_without_the_c_encoder_the_digests_are_the_same(monkeypatch):
    value = {"b": [1, 2.5, None, "é"], "a": True}
    fast = [json_digest(value, **options) for options in OPTIONS]
    digests._encoder.cache_clear()
    monkeypatch.setattr(digests, "c_make_encoder", None)
    try:
        assert [json_digest(value, **options) for options in OPTIONS] == fast
    finally:
        digests._encoder.cache_clear()

"""The pool's connections read json and jsonb with orjson (memory_pipelines/db/jsonb.py), and
every value as the standard library reads it, where the two would differ too."""

from __future__ import annotations

import json

import pytest

from memory_pipelines.db.connection import get_pool
from memory_pipelines.db.jsonb import read_json

DOCUMENTS = [
    '{"speaker": "agent", "is_error": false, "uuid": "8f2c1c1e-0000-4000-8000-000000000000"}',
    '{"nested": {"list": [1, 2.5, null, true, "x"], "empty": {}}, "text": "naïve — 東京 🙂 \\"quoted\\""}',
    '{"id": 123456789012345678901234567890}',  # beyond 64 bits: orjson would read a float
    '{"n": -9223372036854775809}',
    '{"big": 1e400}',  # beyond a double: orjson refuses it
    '{"precise": 0.1000000000000000055511151231257827, "small": 1.5e-320}',
    '[]', '"just a string"', '42',
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_read_json_gives_what_the_standard_library_gives(document):
    value = read_json(document.encode())
    assert value == json.loads(document) and type(value) is type(json.loads(document))


def test_the_pools_connections_read_jsonb_with_it(database_url):
    with get_pool(database_url).connection() as conn:
        read = [conn.execute("SELECT %s::jsonb, %s::jsonb::text, %s::json", [document] * 3).fetchone()
                for document in DOCUMENTS]
    for (as_jsonb, jsonb_text, as_json), document in zip(read, DOCUMENTS, strict=True):
        assert as_json == json.loads(document)
        # jsonb keeps a number's value, not its text (1e400 comes back as its 401 digits)
        assert as_jsonb == json.loads(jsonb_text)
    assert read[2][0]["id"] == 123456789012345678901234567890  # the integer itself, not the nearest float

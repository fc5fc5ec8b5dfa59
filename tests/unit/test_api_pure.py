"""The API's pure parts: reading a bearer key, who a key acts for, the question's limits,
validation errors as one line an agent can act on, the decay score's parts (pure)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from fastapi.exceptions import RequestValidationError

from memory_pipelines.api.asgi import bearer
from memory_pipelines.api.http import _validation_message
from memory_pipelines.api.keys import KEY_PREFIX, SHOWN_CHARS, ApiKey, hash_key
from memory_pipelines.api.access import ApiError, Caller, Forbidden
from memory_pipelines.api.service import MAX_QUESTION_CHARS, _question
from memory_pipelines.config import ConfigError, validate_environment
from memory_pipelines.core.knowledge_entries import decay_score, decay_terms


def key(user_id: str | None, key_id: int = 7) -> ApiKey:
    return ApiKey(key_id, None, user_id, user_id is None, "mpk_abcdef", datetime(2026, 12, 1, tzinfo=UTC), None, None)


@pytest.mark.parametrize("headers, expected", [
    ([(b"authorization", b"Bearer mpk_secret")], "mpk_secret"),
    ([(b"Authorization", b"bearer   mpk_secret  ")], "mpk_secret"),
    ({"authorization": "Bearer mpk_secret"}, "mpk_secret"),
    ([(b"authorization", b"Basic dXNlcjpwdw==")], None),
    ([(b"authorization", b"Bearer")], None),
    ([(b"authorization", b"Bearer   ")], None),
    ([(b"x-api-key", b"mpk_secret")], None),
    ({}, None),
])
def test_bearer_reads_only_a_bearer_authorization(headers, expected):
    assert bearer(headers) == expected


def test_a_user_key_acts_for_its_user_only_and_an_admin_for_the_one_named_or_all():
    bob, admin = Caller(key("bob")), Caller(key(None))
    assert bob.user(None) == bob.user("bob") == bob.one_user(None) == "bob"
    with pytest.raises(Forbidden, match="acts for user 'bob', not 'alice'"):
        bob.user("alice")
    with pytest.raises(Forbidden):
        bob.one_user("alice")
    assert admin.user(None) is None and admin.user("alice") == "alice" == admin.one_user("alice")
    with pytest.raises(ApiError, match="name the user"):
        admin.one_user(None)


def test_lineage_names_the_key_and_the_request_time_never_the_secret():
    lineage = Caller(key("bob", key_id=42)).lineage(datetime(2026, 12, 1, 9, 30, 5, 123, tzinfo=UTC))
    assert lineage == {"run_id": "api:key-42:2026-12-01T09:30:05+00:00", "model": "api", "prompt_version": "api",
                       "partition_key": "2026-12-01"}


def test_a_stored_key_is_a_hash_and_a_prefix_too_short_to_use():
    secret = KEY_PREFIX + "x" * 43
    assert hash_key(secret) != secret and len(hash_key(secret)) == 64 and hash_key(secret) == hash_key(secret)
    assert len(secret[:SHOWN_CHARS]) == SHOWN_CHARS < len(secret) // 4


def test_a_question_is_trimmed_and_bounded():
    assert _question("  ledger port \n") == "ledger port"
    assert _question("x" * MAX_QUESTION_CHARS) == "x" * MAX_QUESTION_CHARS
    for empty in (None, "", "   "):
        with pytest.raises(ApiError, match="the query is empty"):
            _question(empty)
    with pytest.raises(ApiError, match=f"{MAX_QUESTION_CHARS + 1} characters; at most {MAX_QUESTION_CHARS}"):
        _question("x" * (MAX_QUESTION_CHARS + 1))


def test_validation_errors_become_one_line_naming_the_field():
    invalid_json = RequestValidationError([{"type": "json_invalid", "loc": ("body", 0), "msg": "JSON decode error"}])
    assert _validation_message(invalid_json)[0] == "invalid_json"
    unknown = RequestValidationError([
        {"type": "extra_forbidden", "loc": ("body", "colour"), "msg": "Extra inputs are not permitted"},
        {"type": "missing", "loc": ("body", "value"), "msg": "Field required"},
        {"type": "less_than_equal", "loc": ("query", "k"), "msg": "Input should be less than or equal to 20"},
        {"type": "missing", "loc": ("body", "key"), "msg": "Field required"},
    ])
    code, message = _validation_message(unknown)
    assert code == "invalid_request"
    assert message == "colour: unknown field; value: Field required; k: Input should be less than or equal to 20"


def test_decay_terms_are_the_parts_of_the_score():
    fresh = decay_terms(0.5, 0, 0, 0.01)
    assert (fresh.faded, fresh.boost) == (0.5, 0.0) and fresh.rate == pytest.approx(0.01 / 1.5)
    old = decay_terms(0.5, 24 * 30, 3, 0.01)
    assert old.faded == pytest.approx(0.5 * math.exp(-0.01 / 1.5 * 720)) and old.boost == pytest.approx(0.1 * math.log(4))
    assert decay_score(0.5, 24 * 30, 3, 0.01) == pytest.approx(old.faded + old.boost)
    assert decay_terms(0.9, 100, 0, 0.01).rate < decay_terms(0.1, 100, 0, 0.01).rate  # important fades slower
    assert decay_terms(0.5, 0, 10**6, 0.01).boost == 0.3  # accesses boost at most 0.3
    assert decay_terms(0.5, -5, 0, 0.01).faded == 0.5  # a clock ahead of the row is no age


def test_a_bad_api_setting_is_reported_and_the_key_never_echoed():
    with pytest.raises(ConfigError) as caught:
        validate_environment({"MEMORY_API_TIMEOUT": "soon", "MEMORY_API_POOL_SIZE": "500"})
    lines = str(caught.value).splitlines()
    assert len(lines) == 2 and lines[0].startswith("MEMORY_API_TIMEOUT='soon'")
    assert lines[1].startswith("MEMORY_API_POOL_SIZE='500'")
    assert validate_environment({"MEMORY_API_KEY": "mpk_secret"}) == []

"""Knowledge entries, PII, error memory and decay (pure)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipelines.core.knowledge_entries import decay_score, entry_key, importance, prepare, resolved_errors
from memory_pipelines.records import Message
from memory_pipelines import pii
from memory_pipelines.pii import sanitize

T0 = datetime(2026, 10, 1, 9, tzinfo=UTC)


def msg(seq, role, content, **extra):
    return Message(session_id="s1", seq=seq, user_id="u1", role=role, content=content, ts=T0 + timedelta(minutes=seq),
                   content_hash=f"h{seq}", source_file="f", source_line=seq, **extra)


@pytest.mark.parametrize("kind, expected", [("insight", 0.72), ("instruction", 0.63), ("user", 0.54),
                                            ("project", 0.54), ("fact", 0.45), ("event", 0.27)])
def test_importance_by_kind_times_confidence(kind, expected):
    assert importance(kind, 0.9) == pytest.approx(expected)


def test_entry_keys_are_content_addressed_per_scope():
    assert entry_key("user", "Editor", "entity", "u1") == entry_key("user", "  editor ", "entity", "u1")
    assert entry_key("user", "editor", "entity", "u1") != entry_key("user", "editor", "entity", "u2")
    assert entry_key("user", "editor", "entity", "u1") != entry_key("fact", "editor", "entity", "u1")


def test_prepare_validates_scopes_ttl_and_sanitizes():
    messages = [msg(1, "user", "write to jane.doe@example.com"), msg(2, "assistant", "ok")]
    raw = {"entries": [
        {"kind": "user", "title": "Contact", "content": "mail jane.doe@example.com", "confidence": 0.9, "seq": 1},
        {"kind": "event", "title": "Deploy", "content": "deployed"},
        {"kind": "insight", "title": "Caching", "content": "cache the token", "scope": "global"},
        {"kind": "instruction", "title": "Flow", "content": "review first", "scope": "process", "scope_id": "release"},
        {"kind": "instruction", "title": "No id", "content": "x", "scope": "process"},
        {"kind": "opinion", "title": "x", "content": "y"},
        {"kind": "fact", "title": "x", "content": "y", "seq": 99},
    ], "relations": [{"subject": "user", "relation": "works_at", "object": "Acme"}, {"subject": "a"}]}
    entries, relations, problems = prepare(raw, messages, "s1", "u1", ttl_seconds=3600, consent_basis="consent")
    assert [(e.kind, e.scope, e.scope_id, e.user_id) for e in entries] == [
        ("user", "entity", "u1", "u1"), ("event", "session", "s1", "u1"), ("insight", "global", None, None),
        ("instruction", "process", "release", "u1")]
    contact = entries[0]
    assert contact.content == "mail [REDACTED:email]" and contact.has_pii and contact.pii_kinds == ("email",)
    assert contact.valid_until == messages[0].ts + timedelta(hours=1) and contact.consent_basis == "consent"
    assert (contact.seq_start, contact.seq_end) == (1, 1) and entries[1].seq_end == 2
    assert len(problems) == 4
    assert [(r.subject, r.relation, r.object) for r in relations] == [("u1", "works_at", "Acme")]
    unsanitized, _, _ = prepare(raw, messages, "s1", "u1", sanitize_pii=False)
    assert "jane.doe@example.com" in unsanitized[0].content and not unsanitized[0].has_pii


@pytest.mark.parametrize("text, kind", [
    ("mail me at jane.doe@example.com", "email"), ("call +49 30 1234 5678", "phone"),
    ("card 4111 1111 1111 1111", "card"), ("IBAN DE89 3704 0044 0532 0130 00", "iban"),
    ("the node 10.42.7.118 is down", "ip"), ("key sk-abcdefghijklmnop1234567890", "token"),
    ("password: hunter2hunter2", "token"), ("ghp_abcdefghijklmnopqrstuvwxyz123456", "token"),
])
def test_pii_kinds(text, kind):
    result = sanitize(text)
    assert result.kinds == (kind,) and f"[REDACTED:{kind}]" in result.text


@pytest.mark.parametrize("text", ["port 9090 on 127.0.0.1", "card 4111 1111 1111 1112", "version 3.11.7",
                                  "order 2026-10-01", "IBAN DE00 0000 0000 0000 0000 00"])
def test_not_pii(text):
    assert sanitize(text).kinds == () and sanitize(text).text == text


_PII_SAMPLES = [
    "jane.doe@example.com", "+49 30 1234 5678", "(030) 1234-5678", "555.123.4567", "4111 1111 1111 1111",
    "DE89 3704 0044 0532 0130 00", "10.42.7.118", "127.0.0.1", "2001:0db8:85a3:0000:0000:8a2e:0370:7334",
    "fe80:0:0:0:abcd:ef01:2345:6789", "sk-abcdefghijklmnop1234567890", "ghp_abcdefghijklmnopqrstuvwxyz123456",
    "xoxb-1234567890", "AKIA1234567890ABCDEF", "AIza" + "a1" * 16, "eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeKK",
    "API_KEY=abcdefgh12", "Token: abcdefghij", "password = hunter2hunter2", " ", "\n", ",", ".", ":", "=", "-",
    "abcd:ef:ab:cd:ef:aa:bb:cc", "port", "9090", "abc", "Ünïcode", "٣٤٥", "deadbeef:",
]


def _assert_hints_hold(text: str) -> None:
    for _kind, pattern, hint, _keep in pii.PATTERNS:
        if pattern.search(text):
            assert hint.search(text), (pattern.pattern, text)


@pytest.mark.parametrize("text", _PII_SAMPLES)
def test_a_patterns_quick_hint_is_in_each_sample_it_matches(text):
    _assert_hints_hold(text)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_PII_SAMPLES) | st.text(max_size=6), max_size=16).map("".join))
def test_a_patterns_quick_hint_is_in_every_text_it_matches(text):
    """A text without a pattern's hint skips that pattern: the hint must hold wherever the
    pattern matches, or personal data would be kept."""
    _assert_hints_hold(text)


def test_resolved_tool_errors():
    messages = [
        msg(1, "assistant", "", tool_name="shell", tool_args={"cmd": "pytest"}, tool_call_id="a"),
        msg(2, "tool", "Error: No module named httpx", tool_name="shell", tool_call_id="a", metadata={"is_error": True}),
        msg(3, "assistant", "Installing httpx."),
        msg(4, "assistant", "", tool_name="shell", tool_args={"cmd": "pip install httpx && pytest"}, tool_call_id="b"),
        msg(5, "tool", "12 passed", tool_name="shell", tool_call_id="b"),
        msg(6, "tool", "Error: timeout", tool_name="web_search", tool_call_id="c", metadata={"is_error": True}),
    ]
    [fix] = resolved_errors(messages)
    assert (fix.tool, fix.error_seq, fix.fix_seq) == ("shell", 2, 5)
    assert fix.error == "Error: No module named httpx"
    assert fix.fix == 'Installing httpx. → shell({"cmd": "pip install httpx && pytest"})'


def test_decay_formula_values():
    assert decay_score(0.9, 0, 0, 0.001) == pytest.approx(0.9)
    assert decay_score(0.9, 720, 0, 0.001) == pytest.approx(0.9 * math.exp(-0.001 / 1.9 * 720))
    assert decay_score(0.1, 720, 0, 0.001) == pytest.approx(0.1 * math.exp(-0.001 / 1.1 * 720))
    assert decay_score(0.5, 15_000, 1_000_000, 0.001) == pytest.approx(0.5 * math.exp(-10) + 0.3)
    assert decay_score(0.5, 0, 1, 0.001) == pytest.approx(0.5 + 0.1 * math.log(2))


def test_high_importance_fades_about_five_times_slower():
    """Time until the score falls to 0.03 (the point where either is as good as gone):
    importance 0.9 takes about 5x as long as 0.1. Their half-lives differ by (1.9/1.1) = 1.7x."""
    def fade_time(imp, floor=0.03, rate=0.001):
        return (1 + imp) / rate * math.log(imp / floor)

    assert fade_time(0.9) / fade_time(0.1) == pytest.approx(4.9, abs=0.3)
    assert decay_score(0.9, fade_time(0.9), 0, 0.001) == pytest.approx(0.03)

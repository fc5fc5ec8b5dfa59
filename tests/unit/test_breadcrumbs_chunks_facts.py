"""Breadcrumbs, chunk packing, fact validation and the rules extractor (pure)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memory_pipelines.breadcrumbs import (_IN_ONE_RUN, _UNITS, PATTERNS, extract_breadcrumbs, hinted_runs,
                                          merge_breadcrumbs)
from memory_pipelines.core.chunk_packing import CHUNK_MAX_CHARS, Chunk, chunk_breadcrumbs, chunk_line, pack_chunks
from memory_pipelines.core.fact_extraction import canonical_key, normalize_key, render_fact, validate_items
from memory_pipelines.llm.rendering import render_chunk
from memory_pipelines.records import Message
from memory_pipelines.rules.extraction import CHOICE_PATTERNS, USER_PATTERNS, extract_facts
from memory_pipelines.core.summary_fold import rendered_length

T0 = datetime(2026, 10, 1, 9, tzinfo=UTC)


def msg(seq, role, content, **extra) -> Message:
    return Message(session_id="s1", seq=seq, user_id="u1", role=role, content=content,
                   ts=T0 + timedelta(minutes=seq), content_hash=f"h{seq}", source_file="f", source_line=seq, **extra)


# --- breadcrumbs ------------------------------------------------------------------------

@pytest.mark.parametrize("text, crumb", [
    ("see https://docs.example.com/a/b?x=1.", "https://docs.example.com/a/b?x=1"),
    ("run `pytest -q` first", "pytest -q"),
    ("edit /etc/nginx/nginx.conf now", "/etc/nginx/nginx.conf"),
    ("in services/ledger-api/config.toml", "services/ledger-api/config.toml"),
    ("open main.py please", "main.py"),
    ("this is #4521 again", "#4521"),
    ("run it on port 9090", "port 9090"),
    ("the dump is 4,5 GB", "4,5 GB"),
    ("p95 went to 12 ms", "12 ms"),
    ("CPU at 80% all day", "80%"),
    ("raise MAX_POOL_SIZE to 40", "MAX_POOL_SIZE"),
    ("call load_settings() twice", "load_settings"),
    ("the ConfigCache class", "ConfigCache"),
    ("the ledger-api service", "ledger-api"),
    ('the "rolling summary cursor" idea', "rolling summary cursor"),
])
def test_each_kind_of_breadcrumb(text, crumb):
    assert crumb in extract_breadcrumbs([text])


def test_breadcrumbs_rank_kind_then_frequency_and_cap():
    crumbs = extract_breadcrumbs(["a_b a_b c_d https://x.org/y"] + [f"name_{i}" for i in range(60)])
    assert crumbs[0] == "https://x.org/y" and crumbs[1] == "a_b" and len(crumbs) == 40
    assert "and/or" not in extract_breadcrumbs(["this and/or that"])
    assert merge_breadcrumbs(["A", "b"], ["a", "c"]) == ["A", "b", "c"]


_CRUMB_PIECES = st.sampled_from(["port", "PORT", " ", "\t", ".", "-", "_", "/", "py", "json", "yaml", "ms", "GB", "%",
                                 "a", "Z", "q", "Kb", "0", "7", "٣", "é", "İ", "ſ", "K", "\n", "'", "x", "https://",
                                 "`", "#", '"', "“", "”", "«", "»", "~"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_CRUMB_PIECES, max_size=24).map("".join))
def test_a_kinds_quick_hint_is_in_every_text_its_pattern_matches(text):
    """A text without a kind's hint skips that kind's scan: the hint must hold wherever the
    pattern matches, or a breadcrumb is lost."""
    for kind, pattern, _group, hint in PATTERNS:
        if pattern.search(text):
            assert hint.search(text), (kind, text)


# the ticket and amount patterns as first written, with the lookbehind before the match
_PLAIN_FORMS = {"ticket": re.compile(r"(?<![\w&])#\d{2,7}\b"),
                "amount": re.compile(r"(?<![\w.,])\d+(?:[.,]\d+)?\s?" + _UNITS + r"(?![\w])")}


@settings(max_examples=400, deadline=None)
@given(st.lists(_CRUMB_PIECES | st.sampled_from(["#", "&", "#12", "4,5", "٣", "0.5", "a1"]), max_size=24).map("".join))
def test_the_lookbehind_after_the_first_character_matches_as_the_plain_form(text):
    for kind, pattern, _group, _hint in PATTERNS:
        if kind in _PLAIN_FORMS:
            assert [m.span() for m in pattern.finditer(text)] == [m.span() for m in _PLAIN_FORMS[kind].finditer(text)]


@settings(max_examples=600, deadline=None)
@given(st.lists(_CRUMB_PIECES | st.sampled_from(["\u00a0", "\u2003", "\x1f", "(", ")", ":", ",", "&", "#12", "aB",
                                                 "9X", "A_B", "a/b.py", "MAX_X", "ledger-api", "x.toml"]),
                max_size=30).map("".join))
def test_a_kind_in_one_run_matches_in_the_hinted_runs_as_in_the_whole_text(text):
    """Kinds scanned only in the runs of non-space characters that hold a hint find there
    exactly what they find in the whole text, in the same order."""
    runs = hinted_runs(text)
    for kind, pattern, group, _hint in PATTERNS:
        if kind in _IN_ONE_RUN:
            assert [m.group(group) for m in pattern.finditer(runs)] == [m.group(group) for m in pattern.finditer(text)]


# --- chunks -----------------------------------------------------------------------------

def test_chunk_lines_prefix_and_skip():
    assert chunk_line(msg(1, "user", "hi")) == "User: hi"
    assert chunk_line(msg(2, "assistant", "ok")) == "Assistant: ok"
    assert chunk_line(msg(3, "tool", "out", tool_name="shell")) == "Tool result (shell): out"
    assert chunk_line(msg(4, "assistant", "", tool_name="shell", tool_args={"cmd": "ls"})) == \
        'Assistant: [Tool call] shell({"cmd": "ls"})'
    assert chunk_line(msg(5, "system", "You are navi")) is None
    assert chunk_line(msg(6, "assistant", "old summary", metadata={"kind": "summary"})) is None
    big = chunk_line(msg(7, "user", "a" * 20_000 + "END"))
    assert big.endswith("END") and "characters elided" in big and len(big) < 12_100


def test_packing_bounds_closure_and_staleness():
    messages = [msg(i, "user" if i % 2 else "assistant", f"m{i} " + "x" * 700) for i in range(1, 30)]
    closed = pack_chunks(messages, eligible_through=20, stale=False)
    assert closed and all(len(c.content) <= CHUNK_MAX_CHARS for c in closed)
    assert closed[-1].end_seq <= 20
    assert [c.start_seq for c in closed] == [1] + [c.end_seq + 1 for c in closed[:-1]]
    everything = pack_chunks(messages, eligible_through=None, stale=True)
    assert everything[-1].end_seq == 29
    assert [c.content for c in everything[: len(closed)]] == [c.content for c in closed]  # same boundaries
    assert pack_chunks(messages, eligible_through=None, stale=False) == []
    # a message too big for a chunk is a chunk of its own, capped
    alone = pack_chunks([msg(1, "user", "y" * 30_000), msg(2, "assistant", "ok")], None, True)
    assert [c.message_count for c in alone] == [1, 1] and len(alone[0].content) <= 12_100


def test_packing_is_deterministic_and_hashes_content():
    messages = [msg(i, "user", f"message {i} " * 50) for i in range(1, 40)]
    first, again = pack_chunks(messages, 30, False), pack_chunks(messages, 30, False)
    assert first == again and len({c.content_hash for c in first}) == len(first)


def test_chunk_breadcrumbs_union_most_important_first():
    chunk = Chunk("s1", "u1", 1, 2, T0, T0, "User: deploy ledger-api on port 9090 see #77", 2)
    crumbs = chunk_breadcrumbs(chunk, ["ledger-api", "unrelated_key"])
    assert crumbs[0] == "ledger-api" and "port 9090" in crumbs and "#77" in crumbs
    assert crumbs[-1] == "unrelated_key"


# --- facts ------------------------------------------------------------------------------

@pytest.mark.parametrize("a, b", [
    ("language", "preferred_language"), ("Preferred-Language", "language"), ("favoriteLanguage", "language"),
    ("my language", "LANGUAGE"), ("editor_preference", "editor"),
])
def test_respelled_keys_share_a_canonical_key(a, b):
    assert canonical_key(a) == canonical_key(b)


def test_normalize_key():
    assert normalize_key("Preferred Language!") == "preferred_language"
    assert normalize_key("PostgreSQL") == "postgresql"
    assert canonical_key("preferred_name") != canonical_key("name")  # prefixes only strip before a word


def test_items_are_validated_one_by_one():
    messages = [msg(1, "user", "I prefer vim"), msg(2, "assistant", "ok")]
    items = [
        {"category": "preferences", "key": "editor", "value": "vim", "source": "user_explicit", "seq": 1},
        {"category": "preferences", "key": "shell", "value": "zsh"},
        {"category": "identity", "key": "name", "value": "Eve", "user_id": "bob", "source": "tool_call"},
        {"category": "x", "value": "no key"},
        {"category": "x", "key": "k", "value": ["list"]},
        {"category": "x", "key": "k", "value": "v", "source": "rumour"},
        {"category": "x", "key": "k", "value": "v", "seq": 99},
        {"category": "x", "key": "k", "value": "z" * 3000},
        "not an object",
    ]
    accepted, rejected = validate_items(items, messages)
    assert [(c.key, c.confidence, c.seq_start, c.seq_end) for c in accepted] == [
        ("editor", 90, 1, 1), ("shell", 70, 1, 2), ("name", 95, 1, 2)]
    assert accepted[0].last_verified_at == messages[0].ts and accepted[1].last_verified_at == messages[1].ts
    assert len(rejected) == 6
    reasons = " | ".join(r.reason for r in rejected)
    for fragment in ("'key' is a required property", "is not of type", "is not one of", "seq 99",
                     "value: longer than 500 characters", "is not of type 'object'"):
        assert fragment in reasons
    assert validate_items({"not": "a list"}, messages)[1][0].reason == "the answer is not a list of facts"


def test_a_chunk_is_rendered_as_numbered_lines_its_length_counted_as_chunking_counts_it():
    messages = [msg(3, "user", "my editor is vim"), msg(4, "assistant", "", tool_name="shell", tool_args={"cmd": "ls"}),
                msg(5, "tool", "x" * 4500, tool_name="shell")]
    text = render_chunk(messages)
    assert text.splitlines() == ["[3] User: my editor is vim", '[4] [Tool call] shell({"cmd": "ls"})',
                                 "[5] [Tool result] shell: " + "x" * 4000 + "…"]
    assert sum(rendered_length(m) for m in messages) == len(text) + 1  # a newline after each line

def test_fact_prompt_line():
    line = render_fact("preferences", "editor", "neovim", 90, T0, T0 + timedelta(days=34, hours=3))
    assert line == "• [preferences] editor → neovim (confidence: 90%, updated 34d ago)"


@pytest.mark.parametrize("text, expected", [
    ("Hi, my name is Bob Martin and I live in Lisbon.", {("identity", "name", "Bob Martin"),
                                                          ("identity", "location", "Lisbon")}),
    ("I prefer neovim as my editor.", {("preferences", "editor", "neovim")}),
    ("my preferred language is Python", {("preferences", "preferred_language", "Python")}),
    ("ok so language: Python 3.12 is what I use", {("preferences", "language", "Python 3.12")}),
    ("let's run ledger-api on port 8080", {("decisions", "ledger-api_port", "8080")}),
    ("switch tapas-finder from Heroku to Fly.io, region mad", {("decisions", "tapas-finder_deploy_target", "Fly.io")}),
    ("Please always answer in German.", {("preferences", "reply_language", "German")}),
    ("I work at Acme Corp, call me Ally", {("work", "employer", "Acme Corp"), ("identity", "preferred_name", "Ally")}),
    ("what is the weather like?", set()),
])
def test_rules_extraction_from_explicit_statements(text, expected):
    found = {(i["category"], i["key"], i["value"]) for i in extract_facts([msg(1, "user", text)])}
    assert found == expected


_STATEMENTS = [
    "my name is Bob Martin", "MY NAME IS Ana", "Ich heiße Jana Weber", "ich heisse Tom", "me llamo Lucía",
    "call me Ally",
    "I live in Lisbon", "I am based in New York", "I moved to Osaka", "ich wohne in Berlin", "Ich lebe in Wien",
    "vivo en Valparaíso", "我住在上海", "我叫小明", "my e-mail address is a@b.io", "reach me at x.y@mail.example.com",
    "my timezone is Europe/Lisbon", "My Time Zone is UTC+2", "I work at Acme Corp", "I work for Globex",
    "Dana Scully is my manager", "I prefer neovim as my editor", "I PREFER tabs for my indentation",
    "my preferred language is Python", "My favourite shell is zsh", "language: Python 3.12 is what I use",
    "I like concise answers", "i prefer DETAILED ANSWERS", "Please always answer in German", "reply to me in Español",
    "I use Docker at work", "I use Go for backend services", "I use Neovim daily",
    "let's deploy it to Fly.io", "Hosting billing on Render", "switch tapas-finder from Heroku to Fly.io",
    "SWITCHING app from MySQL to Postgres", "recipe-botはSQLiteで行きましょう",
]
_HINTED = [(pattern, hint) for *_, pattern, hint in USER_PATTERNS] + list(CHOICE_PATTERNS)
_STATEMENT_PIECES = st.sampled_from([*_STATEMENTS, " ", ".", ", ", "\n", "and ", "so ", "I ", "my ", "is ", "in "])


@pytest.mark.parametrize("text", _STATEMENTS)
def test_each_statement_is_found_and_holds_its_patterns_hint(text):
    matched = [hint for pattern, hint in _HINTED if pattern.search(text)]
    assert matched and all(hint.search(text) for hint in matched)


@settings(max_examples=400, deadline=None)
@given(st.lists(_STATEMENT_PIECES | st.text(max_size=5), max_size=12).map("".join))
def test_a_fact_patterns_hint_is_in_every_text_it_matches(text):
    """A message without a pattern's hint is not scanned with it: the hint must hold wherever
    the pattern matches, or a stated fact would be missed."""
    for pattern, hint in _HINTED:
        if pattern.search(text):
            assert hint.search(text), (pattern.pattern, text)


def test_rules_extraction_from_key_value_tool_results():
    messages = [
        msg(1, "assistant", "", tool_name="shell", tool_args={"cmd": "cat ~/src/app/config.toml"}, tool_call_id="c1"),
        msg(2, "tool", "port: 8080\nhost: 0.0.0.0\nINFO: started", tool_name="shell", tool_call_id="c1"),
        msg(3, "assistant", "", tool_name="shell", tool_args={"cmd": "cat settings.py"}, tool_call_id="c2"),
        msg(4, "tool", "a: int = 1\nb: str = 'x'", tool_name="shell", tool_call_id="c2"),
        msg(5, "tool", "port: 1\nhost: x", tool_name="shell", tool_call_id="c9", metadata={"is_error": True}),
    ]
    found = {(i["key"], i["value"], i["source"], i["seq"]) for i in extract_facts(messages)}
    assert found == {("config_port", "8080", "tool_call", 2), ("config_host", "0.0.0.0", "tool_call", 2)}

"""The turn-level index and the passages served from it, against the real database: BM25 by
hand, languages, the asset's idempotence, re-embedding when a neighbour arrives, budgets,
times, isolation between users and hostile queries."""

from __future__ import annotations

import json
from dataclasses import replace
import math
from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memory_pipelines.db.vectors import register_vector_types

from assets.definitions import all_assets
from assets.embeddings import memory_embeddings
from assets.ingestion import transcripts
from assets.memory import memory_turns
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.db import facts_chunks as facts_chunks_db
from memory_pipelines.db import turns as turns_db
from memory_pipelines.db.queries import query
from memory_pipelines.embed import EmbedConfig, build_embedder
from memory_pipelines.records import Message
from memory_pipelines.search import UnifiedMemorySearch, format_served, recall
from memory_pipelines.core.turn_index import build_turns, window_text
from tests.helpers import HALFVEC_ATOL, content_fingerprints, materialize_partitions, materialize_range, pipeline_resources

DAYS = [(date(2026, 10, 1) + timedelta(days=i)).isoformat() for i in range(14)]
USERS = ["alice", "bob", "carol", "dmitri", "emi", "fatima", "wei"]
EMBEDDER = build_embedder(EmbedConfig())
T0 = datetime(2026, 10, 1, 9, tzinfo=UTC)


@pytest.fixture(scope="module")
def sample_url(make_module_sample_database):
    return make_module_sample_database()


@pytest.fixture
def conn(sample_url):
    with psycopg.connect(sample_url) as connection:
        register_vector_types(connection)
        yield connection
        connection.rollback()


def test_bm25_matches_the_formula_on_a_three_document_corpus(database_url):
    bodies = ["port port proxy", "port database", "cat"]  # english stems: port, proxi, databas, cat
    messages = [Message("bm-1", i, "bm", "user", b, T0 + timedelta(minutes=i), "h", "f", i) for i, b in enumerate(bodies)]
    with psycopg.connect(database_url) as conn:
        rows = build_turns(messages, [])
        turns_db.store_turns(conn, "bm-1", rows, "test")
        turns_db.refresh_turn_stats(conn, ["bm"])
        assert {r.language for r in rows} == {"english"}
        found = conn.execute(query("turn_text_search"), {
            "user_id": "bm", "all_users": False, "session_id": None, "include_forks": False, "since": None,
            "until": None, "text": "Which proxy port?", "weights": "AB", "k1": 1.2, "b": 0.75, "limit": 10}).fetchall()
    n, avgdl, k1, b = 3, (3 + 2 + 1) / 3, 1.2, 0.75

    def term(tf, df, length):
        return math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avgdl))

    expected = {0: term(2, 2, 3) + term(1, 1, 3), 1: term(1, 2, 2)}
    assert {r[2]: round(r[5], 9) for r in found} == {seq: round(v, 9) for seq, v in expected.items()}
    assert [r[2] for r in found] == [0, 1] and found[0][6] == ["port", "proxi"]


def test_every_message_but_system_is_a_turn_in_its_sessions_language(conn):
    counts = dict(conn.execute("SELECT role, count(*) FROM memory_turns GROUP BY 1").fetchall())
    messages = dict(conn.execute("SELECT role, count(*) FROM messages WHERE role <> 'system' GROUP BY 1").fetchall())
    assert counts == messages
    languages = dict(conn.execute("SELECT session_id, min(language) FROM memory_turns GROUP BY 1").fetchall())
    assert languages["s-bob-0002"] == "english" and "german" in languages.values() and "spanish" in languages.values()
    assert {lang for s, lang in languages.items() if s.startswith("s-wei-")} == {"simple"}  # Chinese
    stats = conn.execute("SELECT sum(turns) FROM memory_turn_stats").fetchone()[0]
    assert stats == sum(counts.values())
    # a Chinese query finds wei's Chinese turns (the simple configuration: words as they are)
    [text] = [r[0] for r in conn.execute("SELECT body FROM memory_turns WHERE user_id = 'wei' AND role = 'user' "
                                         "ORDER BY length(body) DESC LIMIT 1")]
    word = text.split()[0]
    hits = UnifiedMemorySearch(conn, EMBEDDER).search_passages(word, "wei")
    assert hits and word in hits[0].text


def test_the_index_is_the_same_built_day_by_day_in_one_range_or_twice(make_database):
    by_day, in_range = make_database(), make_database()
    materialize_partitions(all_assets, DAYS, by_day, SAMPLE_TRANSCRIPTS)
    materialize_range(all_assets, DAYS[0], DAYS[-1], pipeline_resources(in_range, SAMPLE_TRANSCRIPTS))
    tables = ["memory_turns", "memory_turn_stats"]
    assert content_fingerprints(by_day, tables) == content_fingerprints(in_range, tables)
    before = content_fingerprints(by_day, tables)
    again = materialize_partitions([memory_turns, memory_embeddings], DAYS[3:5], by_day, SAMPLE_TRANSCRIPTS)
    assert content_fingerprints(by_day, tables) == before
    # indexed again, nothing changed: no turn is rewritten, though the sessions were visited
    indexed = [r.asset_materializations_for_node("memory_turns")[0].metadata for r in again]
    assert all(m["sessions_indexed"].value > 0 and m["turns_written"].value == 0 for m in indexed)


def test_a_turn_is_embedded_again_when_its_next_neighbour_arrives(database_url, tmp_path):
    def write(records):
        (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))

    turns = [{"session_id": "late-1", "user_id": "ann", "seq": i, "role": role, "content": text,
              "ts": f"2026-10-01T23:5{i}:00Z"}
             for i, (role, text) in enumerate([("user", "which port for the api?"), ("assistant", "use 9090")])]
    write(turns)
    assets = [transcripts, memory_turns, memory_embeddings]
    materialize_partitions(assets, ["2026-10-01"], database_url, tmp_path)
    embedded = "SELECT window_hash, embedding FROM memory_turns WHERE session_id = 'late-1' AND seq = 1"
    with psycopg.connect(database_url) as conn:
        register_vector_types(conn)
        first_hash, first = conn.execute(embedded).fetchone()
    write(turns + [{"session_id": "late-1", "user_id": "ann", "seq": 2, "role": "user", "content": "thanks, and the db?",
                    "ts": "2026-10-02T00:01:00Z"}])
    materialize_partitions(assets, ["2026-10-02"], database_url, tmp_path)
    with psycopg.connect(database_url) as conn:
        register_vector_types(conn)
        second_hash, second = conn.execute(embedded).fetchone()
    assert second_hash != first_hash and not (first.to_numpy() == second.to_numpy()).all()
    expected = EMBEDDER.embed([window_text("which port for the api?", "use 9090", "thanks, and the db?")])[0]
    assert max(abs(a - b) for a, b in zip(second.to_numpy(), expected, strict=True)) < HALFVEC_ATOL


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.integers(0, 9000), question=st.sampled_from(
    ["which port does ledger-api use", "envoy proxy", "redis test failures", "Umzug Berlin", "deploy target"]),
    user=st.sampled_from(USERS))
def test_what_is_served_never_exceeds_the_budget(conn, budget, question, user):
    served = UnifiedMemorySearch(conn, EMBEDDER).serve(question, user_id=user, budget_chars=budget)
    spent = sum(len(h.text) for h in served.hits)
    assert spent == served.budget.used <= budget
    assert f"characters used: {spent} of {budget}" in format_served(question, "all", served)
    tokens = UnifiedMemorySearch(conn, EMBEDDER).serve(question, user_id=user, budget_tokens=budget // 4)
    assert tokens.budget.used <= budget // 4 and tokens.budget.unit == "tokens"


def test_passages_carry_provenance_and_a_budget_trims_around_the_best_turn(conn):
    search = UnifiedMemorySearch(conn, EMBEDDER)
    [whole] = search.serve("which port does ledger-api use now", scope="raw", k=1, user_id="bob",
                           budget_chars=None).hits
    assert whole.turns and whole.session_id.startswith("s-bob-") and whole.started_at <= whole.timestamp
    assert whole.best_seq in [t.seq for t in whole.turns] and set(whole.roles) <= {"user", "assistant", "tool"}
    assert "port" in whole.terms and whole.text.splitlines()[0].split(":")[0] in ("User", "Assistant", "Tool")
    best_line = next(t.line for t in whole.turns if t.seq == whole.best_seq)
    [trimmed] = search.serve("which port does ledger-api use now", scope="raw", k=1, user_id="bob",
                             budget_chars=len(best_line) + 10).hits
    assert best_line in trimmed.text and len(trimmed.text) <= len(best_line) + 10


def test_a_time_the_question_names_ranks_its_passages_first(conn):
    search = UnifiedMemorySearch(conn, EMBEDDER)
    everywhere = search.serve("port", scope="raw", k=10, user_id="bob", budget_chars=None)
    assert everywhere.time_range is None and len({h.timestamp.date() for h in everywhere.hits}) > 1

    def in_range(hit, named):
        best = next(t for t in hit.turns if t.seq == hit.best_seq)
        return named.since <= best.ts < named.until

    before = search.serve("port two weeks ago", scope="raw", k=10, user_id="bob", budget_chars=None,
                          now=datetime(2026, 10, 14, 12, tzinfo=UTC))
    named = before.time_range
    assert (named.since.date(), named.until.date()) == (date(2026, 9, 27), date(2026, 10, 4))
    assert not in_range(everywhere.hits[0], named)  # bob's best port match (Oct 9) is after that time
    flags = [in_range(h, named) for h in before.hits]
    assert flags[0] and not all(flags)  # that time's passages first, other times still after them
    # a time with nothing in it leaves nothing out
    empty = search.serve("port in 2021", scope="raw", k=3, user_id="bob", budget_chars=None)
    assert empty.time_range.since.year == 2021 and len(empty.hits) == 3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=st.sampled_from(USERS), other=st.sampled_from(USERS), words=st.integers(1, 4))
def test_no_search_ever_returns_another_users_passage(conn, user, other, words):
    # the question is made of another user's own words, so it would find their turns
    rows = conn.execute("SELECT body FROM memory_turns WHERE user_id = %s AND role = 'user' ORDER BY seq LIMIT 3",
                        (other,)).fetchall()
    question = " ".join(" ".join(r[0] for r in rows).split()[:words * 3])
    search = UnifiedMemorySearch(conn, EMBEDDER)
    hits = search.search(question, user_id=user, budget_chars=None, k=10)
    owners = dict(conn.execute("SELECT session_id, user_id FROM sessions").fetchall())
    assert all(h.user_id == user for h in hits)
    assert all(owners[t.session_id] == user for h in hits for t in h.turns)
    if user == other:
        assert any(h.turns for h in hits), "the isolation holds only if search finds something"


@pytest.mark.parametrize("question", ["'; DROP TABLE memory_turns; --", "port':* & !proxy | (", "\\\\' OR 1=1",
                                      "a" * 5000, "':A | 'b':B", "\x00 port", "  "])
def test_query_text_is_only_ever_a_bound_value(conn, question):
    before = conn.execute("SELECT count(*), md5(string_agg(body, '' ORDER BY id)) FROM memory_turns").fetchone()
    UnifiedMemorySearch(conn, EMBEDDER).serve(question.replace("\x00", ""), user_id="bob")
    assert conn.execute("SELECT count(*), md5(string_agg(body, '' ORDER BY id)) FROM memory_turns").fetchone() == before


def test_a_recalled_chunk_is_its_matching_window_not_its_first_characters(conn):
    [(chunk_id, content, start, end)] = conn.execute(
        "SELECT id, content, start_seq, end_seq FROM memory_chunks WHERE session_id = 's-bob-0005' "
        "ORDER BY length(content) DESC LIMIT 1").fetchall()
    recent = [{"role": "user", "content": "the proxy clashes with ledger-api, which port now?"}]
    hits = recall(conn, EMBEDDER, "s-bob-0006", recent, "remind me the ledger-api port switch to 9090", k=2)
    [hit] = [h for h in hits if h.id == chunk_id] or [None]
    assert hit is not None, hits
    assert len(hit.text) < len(content) and "9090" in hit.text
    assert start <= hit.start_seq <= hit.end_seq <= end
    # then not served again to that session
    assert chunk_id not in [h.id for h in recall(conn, EMBEDDER, "s-bob-0006", recent, "ledger-api port 9090", k=2)]


def test_turns_by_score_on_the_distilled_sample_rank_cited_turns_by_their_entries_and_keep_to_the_user(conn):
    from memory_pipelines.search import get_turns_by_score

    bob = get_turns_by_score(conn, "bob", k=500)
    stored = conn.execute("SELECT count(*) FROM memory_turns WHERE user_id = 'bob'").fetchone()[0]
    assert bob.considered == stored == len(bob.turns) > 20
    scores = [s.score for s in bob.turns]
    assert scores == sorted(scores, reverse=True)
    top = bob.turns[0]
    entries = conn.execute("SELECT importance FROM knowledge_entries WHERE session_id = %s AND %s BETWEEN seq_start "
                           "AND seq_end", (top.turn.session_id, top.turn.seq)).fetchall()
    assert top.cited_by and top.importance == pytest.approx(max(float(i) for (i,) in entries), abs=1e-6)
    assert top.importance > bob.turns[-1].importance
    alice = get_turns_by_score(conn, "alice", k=500)
    assert alice.turns and not {s.turn.id for s in alice.turns} & {s.turn.id for s in bob.turns}
    one = get_turns_by_score(conn, "bob", "s-bob-0006", k=500)
    assert {s.turn.session_id for s in one.turns} == {"s-bob-0006"} and one.considered < bob.considered
    assert get_turns_by_score(conn, "alice", "s-bob-0006", k=500).turns == ()


def test_served_turns_count_an_access_that_reindexing_keeps(conn):
    from memory_pipelines.search import get_turns_by_score

    def accesses(ids):
        return dict(conn.execute("SELECT id, access_count FROM memory_turns WHERE id = ANY(%s)", (list(ids),)))

    first = get_turns_by_score(conn, "bob", "s-bob-0005", k=3)
    ids = [s.turn.id for s in first.turns]
    assert accesses(ids) == {s.turn.id: s.turn.access_count + 1 for s in first.turns}
    again = get_turns_by_score(conn, "bob", "s-bob-0005", k=3)
    assert [s.turn.id for s in again.turns] == ids and all(s.terms.boost > 0 for s in again.turns)
    served = UnifiedMemorySearch(conn, EMBEDDER).serve("ledger-api port", "raw", 3, "bob", budget_chars=2000)
    raw_turns = {t.id for h in served.hits for t in h.turns}
    assert raw_turns and all(n >= 1 for n in accesses(raw_turns).values())
    # indexing the session again, with a turn's text changed, leaves every count
    before = accesses(ids)
    messages = facts_chunks_db.sessions_messages(conn, ["s-bob-0005"])["s-bob-0005"]
    changed = [replace(m, content=m.content + " (edited)") if m.seq == first.turns[0].turn.seq else m for m in messages]
    written, _ = turns_db.store_turns(conn, ["s-bob-0005"], build_turns(changed, []), "test")
    assert written >= 1 and accesses(ids) == before

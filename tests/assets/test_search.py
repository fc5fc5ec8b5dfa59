"""The unified search query module over tables the pipeline materialized."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from assets.definitions import all_assets
from assets.embeddings import memory_embeddings
from assets.resources import EmbedderResource
from memory_pipelines.bench import needles
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.db.queries import query
from memory_pipelines.shards import ALL_USERS
from memory_pipelines.embed import EmbedConfig, build_embedder
from memory_pipelines.search import (
    AccessDenied, MemorySearch, UnifiedMemorySearch, format_hits, recall, write_sketch,
)
from tests.helpers import HALFVEC_ATOL, materialize_partitions, pipeline_resources

DAYS = [(date(2026, 10, 1) + timedelta(days=i)).isoformat() for i in range(14)]
USERS = ["alice", "bob", "carol", "dmitri", "emi", "fatima", "wei"]


@pytest.fixture(scope="module")
def sample_url(make_module_sample_database):
    """The whole sample, distilled, for the module's read-only tests."""
    return make_module_sample_database()


@pytest.fixture
def conn(sample_url):
    with psycopg.connect(sample_url) as connection:
        from memory_pipelines.db.vectors import register_vector_types

        register_vector_types(connection)
        yield connection
        connection.rollback()


EMBEDDER = build_embedder(EmbedConfig())


def test_server_port_lists_the_current_fact_first_and_the_old_value_as_outdated(conn):
    hits = UnifiedMemorySearch(conn, EMBEDDER).search("server port", user_id="bob")
    assert hits[0].source_type == "fact" and hits[0].text.endswith("9090")
    old = [h for h in hits if h.source_type == "raw" and "8080" in h.text and h.superseded_by]
    assert old, "the old port should come back as an outdated raw excerpt"
    text = format_hits("server port", "all", hits)
    assert text.splitlines()[0] == f'memory_search "server port" (scope=all): {len(hits)} hit(s)'
    assert "1. fact #" in text and "⚠ outdated: a newer statement overrides this" in text


def test_outdated_names_a_newer_statement_about_what_the_passage_said_never_a_fact_of_another_subject(conn):
    """Issue 37: the passage where bob forbids docker compose (session s-bob-0002, where the
    config file's port and database URL were also read) is current: no newer statement is
    about what its turns said. The recap of that session saying ledger-api runs on 8080 is
    outdated, and the label names what replaced it."""
    served = UnifiedMemorySearch(conn, EMBEDDER).serve("should we use docker compose", "raw", 5, "bob",
                                                       budget_chars=None)
    compose = [h for h in served.hits if "never use docker compose" in h.text]
    assert compose and all(h.superseded_by is None for h in compose)
    recap = [h for h in served.hits if "ledger-api runs on port 8080" in h.text]
    assert recap and all(h.superseded_by in ("ledger_api_port: 9090", "ledger-api listens_on 9090") for h in recap)


@pytest.mark.parametrize("question, answer", [("should we use docker compose", "never use docker compose"),
                                              ("how long do we cache token introspection", "120s as a compromise")])
def test_an_answer_of_one_short_turn_is_served_within_1500_characters(conn, question, answer):
    """Issue 37: the budget goes by value, not to the longest passages first: a long passage
    takes its share while others wait, and what a served conversation settled next comes
    with it."""
    served = UnifiedMemorySearch(conn, EMBEDDER).serve(question, "all", 5, "bob", budget_chars=1500)
    assert served.budget.used <= 1500 and answer in "\n".join(h.text for h in served.hits)


def test_a_knowledge_entry_a_newer_statement_overrides_is_labelled_outdated_and_ranked_after_current_ones(conn):
    hits = UnifiedMemorySearch(conn, EMBEDDER).search("ledger-api port", scope="knowledge", user_id="bob", k=10)
    assert hits[0].superseded_by is None and "9090" in hits[0].text
    [old] = [h for h in hits if "8080" in h.text and "9090" not in h.text]
    # the graph closed (ledger-api, listens_on, 8080) when 9090 was chosen, after this entry
    assert old.superseded_by == "ledger-api listens_on 9090"
    current = [h for h in hits if h.superseded_by is None]
    assert hits == current + [h for h in hits if h.superseded_by], "outdated entries come after current ones"
    # the entry that names the change itself is current
    assert any("8080" in h.text and "9090" in h.text and h.superseded_by is None for h in hits)
    assert "⚠ outdated: a newer statement overrides this (ledger-api listens_on 9090)" in \
        format_hits("ledger-api port", "knowledge", hits)


def test_text_output_names_every_hit_as_lineage_takes_it(conn):
    from memory_pipelines.lineage import lineage

    hits = UnifiedMemorySearch(conn, EMBEDDER).search("ledger-api port", user_id="bob", k=3)
    text = format_hits("ledger-api port", "all", hits)
    kinds = {"fact": "fact", "raw": "chunk", "knowledge": "entry"}
    checked = 0
    for hit in hits:
        if hit.source_type in kinds and hit.id is not None:
            label = f"{kinds[hit.source_type]} #{hit.id}"
            assert label in text, label
            report = lineage(conn, kinds[hit.source_type], str(hit.id))  # the id shown is the id lineage takes
            assert report, label
            checked += 1
    assert checked >= 3


def test_what_the_person_said_of_themselves_comes_first_for_a_question_about_them(conn):
    """Issue 40: alice said in passing that she had been fighting her LSP setup; a question in
    the first person is served that clause, as an entry tagged `self` with lineage to its turn, before
    any passage. A question about the project ("we") is served passages first."""
    class Sent(UnifiedMemorySearch):
        def _fetch(self, statements):
            sent.extend(name for name, _ in statements)
            return super()._fetch(statements)

    sent: list[str] = []
    search = Sent(conn, EMBEDDER)
    hits = search.search("what have I been fighting with all week", user_id="alice", budget_chars=1440)
    assert sent.count("knowledge_search") == 1  # the self tier reads the knowledge tier's rows
    order = [("self" if "self" in (h.tags or ()) else h.source_type) for h in hits]
    assert "self" in order and "raw" in order and order.index("self") < order.index("raw")
    said = next(h for h in hits if "self" in (h.tags or ()) and "LSP" in h.text)
    assert said.kind == "user" and said.user_id == "alice" and said.start_seq == said.end_seq is not None
    turn = conn.execute("SELECT content FROM messages WHERE session_id = %s AND seq = %s",
                        [said.session_id, said.start_seq]).fetchone()[0]
    assert said.text in turn  # its own words, from its own turn
    project = [("self" if "self" in (h.tags or ()) else h.source_type)
               for h in search.search("which database is the source of truth for project Falcon", user_id="alice")]
    assert "raw" in project and "self" not in project[:project.index("raw")]  # in the knowledge tier at most


def test_tiers_scopes_k_and_provenance(conn):
    search = UnifiedMemorySearch(conn, EMBEDDER)
    hits = search.search("ledger-api port", user_id="bob", k=3)
    order = [h.source_type for h in hits]
    tiers = ["fact", "raw", "sketch", "knowledge"]
    assert order == sorted(order, key=tiers.index) and {"fact", "raw", "sketch"} <= set(order)
    for hit in hits:
        assert hit.session_id and hit.timestamp and hit.user_id == "bob"
        if hit.source_type == "fact":
            assert hit.key and hit.category
        elif hit.source_type == "raw":
            assert hit.start_seq is not None and hit.end_seq >= hit.start_seq
        elif hit.source_type == "sketch":
            assert hit.section
        else:
            assert hit.kind and hit.key
    assert {h.source_type for h in search.search("port", scope="facts", user_id="bob")} == {"fact"}
    assert {h.source_type for h in search.search("port", scope="knowledge", user_id="bob")} == {"knowledge"}
    assert {h.source_type for h in search.search("port", scope="sketches", user_id="bob")} == {"sketch"}
    with pytest.raises(ValueError, match="unknown scope 'nonsense': use one of all, facts, raw, sketches, knowledge"):
        search.search("port", scope="nonsense", user_id="bob", k=2)
    assert len([h for h in search.search("port", scope="raw", user_id="bob", k=0)]) == 1
    assert len(search.search("ledger", scope="raw", user_id="bob", k=500)) <= 20


def test_freshness_before_summary_and_empty_query(conn):
    search = UnifiedMemorySearch(conn, EMBEDDER)
    raw = search.search("envoy proxy", scope="raw", user_id="bob")
    assert raw and all(h.before_summary for h in raw)  # every sample session has been summarized since
    assert not search.mark_freshness(raw, "bob", raw[0].session_id, datetime(2000, 1, 1, tzinfo=UTC))[0].before_summary
    recent = MemorySearch(conn, EMBEDDER).search_chunks("  ?!  ", "bob", limit=3)
    ended = [h.timestamp for h in recent]
    assert len(recent) == 3 and ended == sorted(ended, reverse=True)


def test_chunk_text_path_without_breadcrumbs_matches_content_alone(conn):
    """alice's session summary keys name fakeredis: it joins the breadcrumbs of chunks that
    do not say it."""
    search = MemorySearch(conn, EMBEDDER)
    with_crumbs = {h.id for h in search.search_chunks("fakeredis", "alice", limit=20, mode="text")}
    content_only = {h.id for h in search.search_chunks("fakeredis", "alice", limit=20, mode="text",
                                                       breadcrumbs=False)}
    holding = {r[0] for r in conn.execute(
        "SELECT id FROM memory_chunks WHERE user_id = 'alice' AND content ILIKE '%fakeredis%'")}
    assert holding and content_only == holding and holding < with_crumbs


def test_bench_retrieval_scores_every_row_and_changes_nothing(conn):
    accesses = "SELECT (SELECT sum(access_count) FROM memory_facts) + (SELECT sum(access_count) FROM knowledge_entries)"
    before = conn.execute(accesses).fetchone()[0]
    scores = {s.mode: s for s in needles.retrieval(conn, EMBEDDER, k=5)}
    assert list(scores) == ["vector", "text", "hybrid", "tiered", "unified", "text - breadcrumbs",
                            "hybrid - breadcrumbs", "hybrid + facts", "hybrid + summaries",
                            "hybrid + facts + summaries"]
    assert all(0 <= s.recall_at_k <= 1 and 0 <= s.ndcg_at_k <= 1 for s in scores.values())
    assert {s.questions for s in scores.values()} == {scores["hybrid"].questions} and scores["hybrid"].questions >= 20
    assert scores["unified"].recall_at_k > 0.5
    # the text path does not embed: these hold for any embedder. Breadcrumbs never cost the
    # text path a relevant chunk (what they change is tested above); each extra key moves
    # hybrid's ranking.
    assert scores["text - breadcrumbs"].ndcg_at_k <= scores["text"].ndcg_at_k
    for row in ("hybrid + facts", "hybrid + summaries"):
        assert scores[row].ndcg_at_k != scores["hybrid"].ndcg_at_k, row
    assert conn.execute(accesses).fetchone()[0] == before  # unified search counted them in a rolled-back transaction


def test_archive_keyword_search_widens_hits(conn):
    hits = MemorySearch(conn, EMBEDDER).search_archive("envoy", "bob", limit=3)
    assert hits and all("envoy" in h.text.lower() for h in hits)
    for hit in hits:
        seqs = [m["seq"] for m in hit.context]
        assert hit.start_seq in seqs and min(seqs) >= hit.start_seq - 2 and max(seqs) <= hit.start_seq + 1


def test_sketches_from_scratchpad_calls_and_the_write_path(conn):
    search = MemorySearch(conn, EMBEDDER)
    notes = search.search_sketches("ledger_api_port", "bob")
    assert [h.text for h in notes] == ["ledger_api_port: 9090"]  # updated in place: the later write won
    write_sketch(conn, "bob", "s-bob-0008", "plan", "next_step", "write the runbook",
                 at=datetime(2026, 10, 13, 19, tzinfo=UTC))
    first = search.search_sketches("", "bob", current_session_id="s-bob-0008")
    assert first[0].session_id == "s-bob-0008"
    with pytest.raises(AccessDenied):
        write_sketch(conn, "eve", "s-bob-0008", "plan", "x", "y")


def test_recall_thresholds_and_ledger(conn):
    recent = [{"role": "user", "content": "what did we change about the ledger-api port and envoy?"}]
    first = recall(conn, EMBEDDER, "s-bob-0008", recent, "and where is it configured?")
    assert 1 <= len(first) <= 2 and all(h.superseded_by is None for h in first)
    assert all((h.similarity or 0) >= 0.55 or (h.matched_terms or 0) >= 2 for h in first)
    second = recall(conn, EMBEDDER, "s-bob-0008", recent, "and where is it configured?")
    assert not {h.id for h in first} & {h.id for h in second}  # never the same excerpt twice
    assert recall(conn, EMBEDDER, "no-such-session", recent, "x") == []
    for chunk_id in range(10_000, 10_150):
        conn.execute("INSERT INTO recall_ledger (session_id, chunk_id) VALUES ('s-bob-0008', %s)", (chunk_id,))
    recall(conn, EMBEDDER, "s-bob-0008", recent, "zzz")
    assert conn.execute("SELECT count(*) FROM recall_ledger WHERE session_id = 's-bob-0008'").fetchone()[0] == 100


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user=st.sampled_from(USERS + ["nobody", "bob' OR '1'='1"]),
       text=st.text(min_size=0, max_size=60) | st.sampled_from(["port", "ledger", "Python", "%", "_", "*"]))
def test_a_users_search_never_returns_another_users_rows(conn, user, text):
    for hit in UnifiedMemorySearch(conn, EMBEDDER).search(text, user_id=user, k=20):
        assert hit.user_id == user


def test_cross_user_search_needs_admin(conn):
    with pytest.raises(AccessDenied):
        UnifiedMemorySearch(conn, EMBEDDER).search("port")
    hits = UnifiedMemorySearch(conn, EMBEDDER, admin=True).search("port", k=20)
    assert len({h.user_id for h in hits}) > 1


@pytest.mark.parametrize("text", ["'; DROP TABLE memory_facts; --", "port%' OR 1=1 --", "a | b & !c <-> d",
                                  "x" * 2_000_000, "\\x00\\u0000 port"])
def test_sql_looking_and_huge_queries_are_inert(conn, text):
    before = conn.execute("SELECT count(*) FROM memory_facts").fetchone()[0]
    UnifiedMemorySearch(conn, EMBEDDER).search(text, user_id="bob", k=5)
    assert conn.execute("SELECT count(*) FROM memory_facts").fetchone()[0] == before


def test_switching_embedding_models_reembeds_and_never_mixes_dimensions(database_url, tmp_path):
    import shutil

    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder)
    resources = {**pipeline_resources(database_url, folder), "embedder": EmbedderResource()}
    materialize_partitions(all_assets, DAYS, database_url, folder, resources=resources)
    small = EmbedderResource(dimension=64)
    switched = build_embedder(EmbedConfig(dimension=64))
    with psycopg.connect(database_url) as conn:
        before = UnifiedMemorySearch(conn, switched)
        hits = before.search("ledger-api port", user_id="bob")
        conn.rollback()
    # the stored vectors are another model's: text ranking alone, said once, naming both models
    assert hits and all(h.similarity is None for h in hits)
    [warning] = before.warnings
    assert warning.configured == "hashing:hashing-v1:64" and warning.stored == ("hashing:hashing-v1:384",)
    assert "hashing:hashing-v1:384" in warning.message and "hashing:hashing-v1:64" in warning.message
    [run] = materialize_partitions([memory_embeddings], [DAYS[-1]], database_url, folder,
                                   resources={**resources, "embedder": small})
    [mat] = run.asset_materializations_for_node("memory_embeddings")
    assert mat.metadata["chunks_re_embedded"].value == mat.metadata["chunks_embedded"].value > 0
    assert mat.metadata["facts_re_embedded"].value > 0 and mat.metadata["entries_re_embedded"].value > 0
    with psycopg.connect(database_url) as conn:
        after = UnifiedMemorySearch(conn, switched)
        hits = after.search("ledger-api port", user_id="bob")
        conn.rollback()
    assert after.warnings == [] and any(h.similarity is not None for h in hits)
    with psycopg.connect(database_url) as conn:
        models = conn.execute("SELECT DISTINCT embedding_model, vector_dims(embedding) FROM memory_chunks").fetchall()
        hnsw = conn.execute("SELECT count(*) FROM pg_class c JOIN pg_am am ON am.oid = c.relam "
                            "WHERE am.amname = 'hnsw'").fetchone()[0]
        hidden = conn.execute("SELECT count(*) FROM memory_facts WHERE merged_into IS NOT NULL "
                              "AND embedding_model = 'hashing:hashing-v1:64'").fetchone()[0]
    assert models == [("hashing:hashing-v1:64", 64)]
    assert hnsw == 0  # searches are per user: an exact scan, no vector index to build (migration 0010)
    assert hidden == 0
    # running it again touches nothing
    [again] = materialize_partitions([memory_embeddings], [DAYS[-1]], database_url, folder,
                                     resources={**resources, "embedder": small})
    [materialization] = again.asset_materializations_for_node("memory_embeddings")
    assert materialization.metadata["chunks_embedded"].value == 0


def test_every_stored_embedding_describes_the_rows_current_text(conn):
    """A fact whose value changed, or an entry whose content changed, is embedded again:
    no vector may describe text the row no longer holds (bob's port went 8080 -> 9090)."""
    checked = 0
    for name in ("facts_needing_embedding", "entries_needing_embedding"):
        table = "memory_facts" if name.startswith("facts") else "knowledge_entries"
        # the same text the embedder was given, for every embedded row of this model
        rows = conn.execute(query(name).replace("(embedding IS NULL OR embedding_model IS DISTINCT FROM %(model)s)",
                                                "embedding_model = %(model)s"),
                            {"model": EMBEDDER.model_id, "after": 0, "limit": 100_000, **ALL_USERS.params}).fetchall()
        stored = dict(conn.execute(f"SELECT id, embedding FROM {table} WHERE embedding_model = %s",
                                   (EMBEDDER.model_id,)).fetchall())
        for (row_id, text, _), vector in zip(rows, EMBEDDER.embed([t for _, t, _ in rows])):
            assert np.allclose(stored[row_id].to_numpy(), vector, atol=HALFVEC_ATOL), (table, row_id, text)
            checked += 1
    assert checked > 50

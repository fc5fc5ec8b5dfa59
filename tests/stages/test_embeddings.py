"""Stage `memory_embeddings` run directly with the hashing embedder: every visible fact,
chunk, knowledge entry and turn without a vector of the current model is embedded, and
nothing else; another model re-embeds everything, counted as re-embedded."""

from __future__ import annotations

import psycopg
from psycopg import sql

from memory_pipelines.embed import EmbedConfig, HashingEmbedder
from memory_pipelines.stages import embeddings
from memory_pipelines.stages.common import Backends
from tests.stages.chain import (
    SAMPLE_DAYS, rows, run_stage, run_upstream, scalar, table_contents, window, write_session,
)

MODEL = "hashing:hashing-v1:384"
VISIBLE = {"memory_facts": "merged_into IS NULL", "memory_chunks": "true", "knowledge_entries": "true",
           "memory_turns": "true"}


def ids(url: str, table: str, where: str) -> list[int]:
    return [r[0] for r in rows(url, f"SELECT id FROM {table} WHERE {where} ORDER BY id")]


def test_a_new_day_embeds_only_what_it_wrote_or_changed(pool, database_url, tmp_path):
    write_session(tmp_path, "s1", "ann", [("user", "let's run api on port 8080"), ("assistant", "ok")])
    run_upstream(pool, "memory_embeddings", "2026-10-01", source=tmp_path)
    first = run_stage(pool, "memory_embeddings", "2026-10-01")
    assert first.counts.metadata() == {
        "model": MODEL, "facts_embedded": 1, "facts_re_embedded": 0, "chunks_embedded": 1, "chunks_re_embedded": 0,
        "entries_embedded": 2, "entries_re_embedded": 0, "turns_embedded": 2, "turns_re_embedded": 0}
    assert scalar(database_url, "SELECT count(*) FROM knowledge_entries WHERE embedding_model = %s", (MODEL,)) == 2

    # the port changes on the next day: the fact and its entry are rewritten (their vectors
    # dropped), one entry, one chunk and two turns are new
    write_session(tmp_path, "s2", "ann", [("user", "switch api to port 9090 from now on"), ("assistant", "ok")],
                  day="2026-10-02")
    run_upstream(pool, "memory_embeddings", "2026-10-02", source=tmp_path, run_id="day2")
    assert rows(database_url, "SELECT key, value, embedding IS NULL FROM memory_facts") == [("api_port", "9090", True)]
    second = run_stage(pool, "memory_embeddings", "2026-10-02", run_id="day2")
    assert dict(second.counts.embedded) == {"memory_facts": 1, "memory_chunks": 1, "knowledge_entries": 2,
                                            "memory_turns": 2}
    assert sum(second.counts.re_embedded.values()) == 0
    scope = second.check_scope
    assert scope["memory_facts"] == ids(database_url, "memory_facts", "key = 'api_port'")
    assert scope["knowledge_entries"] == ids(database_url, "knowledge_entries", "partition_key = '2026-10-02'")
    assert scope["memory_chunks"] == ids(database_url, "memory_chunks", "session_id = 's2'")
    assert scope["memory_turns"] == ids(database_url, "memory_turns", "session_id = 's2'")
    assert (scope["model"], scope["dimension"]) == (MODEL, 384)


def test_the_samples_rows_are_embedded_once_and_again_for_another_model(pool, database_url):
    run_upstream(pool, "memory_embeddings", SAMPLE_DAYS)
    visible = {table: scalar(database_url, f"SELECT count(*) FROM {table} WHERE {where}")
               for table, where in VISIBLE.items()}
    assert all(visible.values())
    # small pages: many transactions, the same result
    report = run_stage(pool, "memory_embeddings", SAMPLE_DAYS, settings=embeddings.Settings(page_rows=50))
    counts = report.counts
    assert counts.model == MODEL and dict(counts.embedded) == visible
    assert sum(counts.re_embedded.values()) == 0
    for table, where in VISIBLE.items():
        assert rows(database_url, f"SELECT embedding_model, vector_dims(embedding), count(*) FROM {table} "
                                  f"WHERE {where} GROUP BY 1, 2") == [(MODEL, 384, visible[table])]
        assert sorted(report.check_scope[table]) == ids(database_url, table, where)
    # a fact hidden behind a merge is not embedded
    assert scalar(database_url, "SELECT count(*) FROM memory_facts WHERE merged_into IS NOT NULL "
                                "AND embedding IS NOT NULL") == 0

    before = table_contents(database_url)
    again = run_stage(pool, "memory_embeddings", SAMPLE_DAYS, run_id="again").counts
    assert sum(again.embedded.values()) == 0 and sum(again.re_embedded.values()) == 0
    assert table_contents(database_url) == before

    other = run_stage(pool, "memory_embeddings", SAMPLE_DAYS, run_id="other", embed=EmbedConfig(dimension=128)).counts
    assert other.model == "hashing:hashing-v1:128"
    assert dict(other.embedded) == dict(other.re_embedded) == visible
    assert rows(database_url, "SELECT DISTINCT embedding_model, vector_dims(embedding) FROM memory_turns") == [
        ("hashing:hashing-v1:128", 128)]


def test_a_text_met_again_on_a_later_page_is_embedded_once_a_run(pool, database_url, tmp_path):
    class Counted(HashingEmbedder):
        def __init__(self, config):
            super().__init__(config)
            self.texts: list[str] = []

        def _embed_batch(self, texts):
            self.texts += texts
            return super()._embed_batch(texts)

    # three users say the same: their turns' windows and facts repeat, on pages apart
    for user in ("ann", "ben", "cy"):
        write_session(tmp_path, f"s-{user}", user, [("user", "let's run api on port 8080"), ("assistant", "ok"),
                                                    ("user", "and keep the logs for 30 days"), ("assistant", "ok")])
    run_upstream(pool, "memory_embeddings", "2026-10-01", source=tmp_path)
    texts = embeddings.texts_embedded(pool)
    assert len(set(texts)) < len(texts)
    for kept, expected in ((embeddings.REUSED_TEXTS, len(set(texts))), (0, None)):
        counted = Counted(EmbedConfig())
        with psycopg.connect(database_url) as conn:
            for table in VISIBLE:
                conn.execute(sql.SQL("UPDATE {} SET embedding = NULL, embedding_model = NULL").format(
                    sql.Identifier(table)))
        report = embeddings.run(pool, window("2026-10-01"), embeddings.Settings(page_rows=3, reused_texts=kept),
                                Backends(embedder=counted))
        assert sum(report.counts.embedded.values()) == len(texts)
        if expected is not None:
            assert sorted(counted.texts) == sorted(set(texts))  # each distinct text once
            reused = table_contents(database_url)
        else:  # nothing kept: a text repeated on another page is embedded again, to the same vector
            assert len(set(texts)) < len(counted.texts) < len(texts)
            assert table_contents(database_url) == reused

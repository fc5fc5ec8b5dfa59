"""The `memory_tree` asset on the distilled sample: leaves cover every chunked turn exactly
once, scene trees hold every chunked session, a re-run writes nothing, a new chunk rewrites
only the nodes on its path, forget takes a session's tree and its user's scene tree."""

from __future__ import annotations

import shutil
from datetime import timedelta

import dagster as dg
import psycopg
import pytest

from assets.definitions import all_assets
from assets.memory import memory_tree
from assets.resources import ModelResource
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.db import tree as tree_db
from memory_pipelines.lifecycle import forget
from tests.fakes import FakeModelServer, Fault
from tests.helpers import QUIET, SAMPLE_DAYS, materialize_partitions, pipeline_resources


def _tree_rows(conn) -> dict[tuple, tuple]:
    return {(kind, tree, node): (digest, run_id) for kind, tree, node, digest, run_id in conn.execute(
        "SELECT tree_kind, tree_key, node_key, content_hash, run_id FROM memory_tree")}


def _grow(url: str, day: str) -> dg.ExecuteInProcessResult:
    result = dg.materialize([memory_tree], partition_key=day, resources=pipeline_resources(url, SAMPLE_TRANSCRIPTS),
                            instance=dg.DagsterInstance.ephemeral(), run_config=QUIET)
    assert result.success
    return result


@pytest.fixture
def sample_url(make_sample_database):
    return make_sample_database()


def test_leaves_cover_every_chunked_turn_once_and_scene_trees_every_chunked_session(sample_url):
    with psycopg.connect(sample_url) as conn:
        chunked = conn.execute("SELECT user_id, session_id, start_seq, end_seq FROM memory_chunks").fetchall()
        assert len(chunked) > 40
        users = sorted({u for u, *_ in chunked})
        for user_id in users:
            sessions = sorted({s for u, s, *_ in chunked if u == user_id})
            for session_id in sessions:
                nodes = tree_db.tree_nodes(conn, user_id, "session", session_id)
                covered = [(s.session_id, seq) for n in nodes if n.level == 0 for s in n.spans
                           for seq in range(s.seq_start, s.seq_end + 1)]
                expected = [(session_id, seq) for u, s, a, b in chunked if s == session_id for seq in range(a, b + 1)]
                assert sorted(covered) == sorted(expected) and len(set(covered)) == len(covered)
                assert sum(n.parent_key is None for n in nodes) == 1
            scene = tree_db.tree_nodes(conn, user_id, "scene", user_id)
            assert sorted(n.node_key for n in scene if n.level == 0) == [f"session:{s}" for s in sessions]
            assert {n.node_key.split(":")[0] for n in scene if n.parent_key is None} == {"month"}
        assert not {s for _, s, *_ in chunked if _ == "alice"} & {
            s.session_id for n in tree_db.tree_nodes(conn, "bob", "scene", "bob") for s in n.spans}
        deepest = conn.execute("SELECT max(level) FROM memory_tree WHERE tree_kind = 'session'").fetchone()[0]
        assert deepest >= 1


def test_a_rerun_writes_nothing_and_a_new_chunk_rewrites_only_its_path(sample_url):
    with psycopg.connect(sample_url) as conn:
        before = _tree_rows(conn)
    _grow(sample_url, SAMPLE_DAYS[-1])
    with psycopg.connect(sample_url) as conn:
        assert _tree_rows(conn) == before  # idempotent: not even the run id moves
        session_id, user_id, end, ended = conn.execute(
            "SELECT session_id, user_id, max(end_seq), max(ended_at) FROM memory_chunks WHERE user_id = 'bob' "
            "GROUP BY 1, 2 ORDER BY count(*) DESC, 1 LIMIT 1").fetchone()
        day = (ended + timedelta(days=1)).date().isoformat()
        conn.execute(
            "INSERT INTO memory_chunks (user_id, session_id, start_seq, end_seq, started_at, ended_at, content, "
            "content_hash, breadcrumbs, message_count, partition_key, run_id, model, prompt_version) "
            "VALUES (%s, %s, %s, %s, %s, %s, 'User: one more thing about the ledger port.', 'h-new', "
            "ARRAY['ledger'], 1, %s, 'test', 'rules', 'v1')",
            (user_id, session_id, end + 1, end + 1, ended + timedelta(minutes=1), ended + timedelta(minutes=2), day))
        conn.commit()
    result = _grow(sample_url, day)
    with psycopg.connect(sample_url) as conn:
        after = _tree_rows(conn)
        nodes = {(n.tree_kind, n.tree_key, n.node_key): n for kind, key in (("session", session_id), ("scene", user_id))
                 for n in tree_db.tree_nodes(conn, user_id, kind, key)}
    changed = {k for k, (digest, _) in after.items() if before.get(k, (None,))[0] != digest}
    new_leaf = max((k for k in nodes if k[0] == "session" and nodes[k].level == 0), key=lambda k: nodes[k].position)
    path = set()
    for start in (new_leaf, ("scene", user_id, f"session:{session_id}")):
        key = start
        while key is not None:
            path.add(key)
            parent = nodes[key].parent_key
            key = None if parent is None else (key[0], key[1], parent)
    assert changed and changed <= path and ("session", session_id, new_leaf[2]) in changed
    assert {k for k in before if k not in after} <= path  # a root replaced by the grown one, at most
    assert all(after[k][1] == before[k][1] for k in after if k in before and k not in changed)
    assert result.asset_materializations_for_node("memory_tree")[0].metadata["nodes_written"].value == len(changed)


def test_forget_takes_a_sessions_tree_and_its_users_scene_tree_the_next_run_builds_the_scene_again(sample_url):
    with psycopg.connect(sample_url) as conn:
        [session_id] = conn.execute("SELECT session_id FROM memory_chunks WHERE user_id = 'bob' ORDER BY session_id "
                                    "LIMIT 1").fetchone()
        alice_before = [n.content_hash for n in tree_db.tree_nodes(conn, "alice", "scene", "alice")]
        report = forget(conn, "bob", session_id=session_id)
        conn.commit()
        assert report["memory_tree"] > 0
        assert tree_db.tree_nodes(conn, "bob", "session", session_id) == []
        assert tree_db.tree_nodes(conn, "bob", "scene", "bob") == []
        assert tree_db.tree_nodes(conn, "bob", "entity", "bob:ledger-api") == []
        assert [n.content_hash for n in tree_db.tree_nodes(conn, "alice", "scene", "alice")] == alice_before
    _grow(sample_url, SAMPLE_DAYS[-1])
    with psycopg.connect(sample_url) as conn:
        scene = tree_db.tree_nodes(conn, "bob", "scene", "bob")
        assert scene and f"session:{session_id}" not in {n.node_key for n in scene}
        entity = tree_db.tree_nodes(conn, "bob", "entity", "bob:ledger-api")
        assert entity and not {s.session_id for n in entity for s in n.spans} & {session_id}


def test_an_entity_tree_holds_what_memory_says_about_the_entity_over_time(sample_url):
    with psycopg.connect(sample_url) as conn:
        nodes = tree_db.tree_nodes(conn, "bob", "entity", "bob:ledger-api")
        leaves = {n.node_key: n for n in nodes if n.level == 0}
        relations = [n.summary for k, n in leaves.items() if k.startswith("relation:")]
        assert "ledger-api listens_on 8080 (until 2026-10-09)" in relations and "ledger-api listens_on 9090" in relations
        assert leaves["fact:decisions/ledger_api_port"].summary == "decisions/ledger_api_port: 9090"
        assert any(k.startswith("entry:") for k in leaves)
        # each item once, under its day, month and year; its spans are bob's turns
        assert len(leaves) == conn.execute("SELECT count(*) FROM memory_tree WHERE tree_key = 'bob:ledger-api' "
                                           "AND level = 0").fetchone()[0]
        by_key = {n.node_key: n for n in nodes}
        for leaf in leaves.values():
            day = by_key[leaf.parent_key]
            assert day.node_key == f"day:{leaf.started_at:%Y-%m-%d}"
            assert by_key[day.parent_key].parent_key == f"year:{leaf.started_at:%Y}"
        bobs = {r[0] for r in conn.execute("SELECT session_id FROM sessions WHERE user_id = 'bob'")}
        assert {s.session_id for n in leaves.values() for s in n.spans} <= bobs
        users = {r[0] for r in conn.execute("SELECT DISTINCT user_id FROM entity_graph")}
        trees = {r[0] for r in conn.execute("SELECT DISTINCT user_id FROM memory_tree WHERE tree_kind = 'entity'")}
        assert users == trees and len(users) > 2


def test_forest_recall_serves_passages_inside_the_leaves_it_reached_with_their_path_and_only_the_users(sample_url):
    from memory_pipelines.embed import EmbedConfig, build_embedder
    from memory_pipelines.search import AccessDenied, UnifiedMemorySearch

    embedder = build_embedder(EmbedConfig())
    with psycopg.connect(sample_url) as conn:
        search = UnifiedMemorySearch(conn, embedder)
        hits = search.search_forest("which port does ledger-api use", "bob", limit=5)
        assert hits, "forest recall finds bob's passages"
        for hit in hits:
            assert hit.session_id.startswith("s-bob-") and hit.path and hit.path[0].startswith("month:")
            leaf = hit.path[-1].split(": ", 1)[0]
            [node] = [n for n in tree_db.tree_nodes(conn, "bob", "session", hit.session_id) if n.node_key == leaf]
            assert node.level == 0 and node.spans[0].seq_start <= hit.best_seq <= node.spans[0].seq_end
        alice = search.search_forest("which port does ledger-api use", "alice", limit=5)
        assert not {h.session_id for h in alice} & {h.session_id for h in hits}
        served = search.serve("which port does ledger-api use", "raw", 3, "bob", budget_chars=3000, mode="forest")
        assert served.hits and all(h.path for h in served.hits) and served.budget.used <= 3000
        with pytest.raises(ValueError, match="unknown mode 'deep'"):
            search.serve("port", "raw", 3, "bob", mode="deep")
        with pytest.raises(AccessDenied, match="name the user"):
            search.search_forest("port", None)
        conn.rollback()
    embedder.close()


@pytest.fixture
def bob_on_a_model(make_database, tmp_path):
    """bob's sample in a fresh database, with a fake model server as chat and decision model:
    (database url, transcripts folder, the server, the run's resources)."""
    folder = tmp_path / "bob"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder / "bob")
    url = make_database()
    server = FakeModelServer()
    model = ModelResource(backend="ollama", base_url=server.url, model="fake-llm", retries=1, backoff_s=0.0)
    try:
        yield url, folder, server, pipeline_resources(url, folder, llm=model, decision=model)
    finally:
        server.close()


def test_a_model_back_end_writes_each_new_or_changed_internal_node_once(bob_on_a_model):
    url, folder, server, resources = bob_on_a_model
    # the day s-bob-0005 ends in two chunks: a session tree with a root, and the scene's day, week, month
    materialize_partitions(all_assets, ["2026-10-09"], url, folder, resources=resources)
    asked = server.by_purpose("summarize_node")
    with psycopg.connect(url) as conn:
        internal = conn.execute("""
            SELECT n.tree_kind, n.model, n.summary, n.source_hash, array_agg(c.summary ORDER BY c.position)
            FROM memory_tree n JOIN memory_tree c ON c.tree_kind = n.tree_kind AND c.tree_key = n.tree_key
                                                 AND c.parent_key = n.node_key
            WHERE n.level > 0 GROUP BY 1, 2, 3, 4, n.node_key""").fetchall()
        logged = conn.execute("SELECT count(*) FROM llm_calls WHERE asset = 'memory_tree' "
                              "AND purpose = 'summarize_node' AND status = 'ok'").fetchone()[0]
    # every internal node over several children is the model's, one call each; one over a single
    # child says what its child says, with no call (the fake model distils no graph: no entity trees)
    assert {kind for kind, *_ in internal} == {"session", "scene"}
    condensed = [(m, s, h) for _, m, s, h, below in internal if len(below) > 1]
    assert condensed and all(m == "fake-llm" and " parts, from: " in s and h for m, s, h in condensed)
    assert all(s == below[0] for _, _, s, _, below in internal if len(below) == 1)
    assert len(asked) >= len(condensed) and logged == len(asked)
    before = _tree_rows_of(url)
    materialize_partitions([memory_tree], ["2026-10-09"], url, folder, resources=resources)
    assert len(server.by_purpose("summarize_node")) == len(asked)  # nothing changed: no call
    assert _tree_rows_of(url) == before


def test_a_week_is_summarized_by_the_model_once_the_user_has_moved_past_it(bob_on_a_model):
    url, folder, server, resources = bob_on_a_model
    week, month = ("scene", "bob", "week:2026-10:2026-W41"), ("scene", "bob", "month:2026-10")

    def written_by() -> dict[tuple, str]:
        with psycopg.connect(url) as conn:
            return {(kind, key, node): model for kind, key, node, model in conn.execute(
                "SELECT tree_kind, tree_key, node_key, model FROM memory_tree WHERE level > 0")}

    # bob spoke on 2026-10-07 and 10-09, both in ISO week 41: the week is still going on
    materialize_partitions(all_assets, ["2026-10-07", "2026-10-09"], url, folder, resources=resources)
    assert written_by()[week] == "rules"
    asked = len(server.by_purpose("summarize_node"))
    # his session of Monday 2026-10-12 closes week 41 (one call for it), not October
    materialize_partitions(all_assets, ["2026-10-12"], url, folder, resources=resources)
    after = written_by()
    assert after[week] == "fake-llm" and after[month] == "rules"
    assert len(server.by_purpose("summarize_node")) > asked


def test_a_failed_node_summary_leaves_its_tree_as_stored_and_fails_the_step(make_database, tmp_path):
    folder = tmp_path / "bob"
    shutil.copytree(SAMPLE_TRANSCRIPTS / "bob", folder / "bob")
    url = make_database()
    down = FakeModelServer(fail=lambda request, number: Fault(status=503) if request.purpose == "summarize_node"
                           else None)
    try:
        model = ModelResource(backend="ollama", base_url=down.url, model="fake-llm", retries=0, backoff_s=0.0)
        [result] = materialize_partitions(all_assets, ["2026-10-09"], url, folder, expect_success=False,
                                          resources=pipeline_resources(url, folder, llm=model, decision=model))
    finally:
        down.close()
    assert not result.success
    failed = [e for e in result.all_events if e.is_step_failure]
    assert [e.step_key for e in failed] == ["memory_tree"]
    assert "tree" in failed[0].step_failure_data.user_failure_data.description
    with psycopg.connect(url) as conn:
        # nothing half-summarized was stored; the failed calls are in the ledger
        assert conn.execute("SELECT count(*) FROM memory_tree WHERE level > 0").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM llm_calls WHERE purpose = 'summarize_node' "
                            "AND status = 'error'").fetchone()[0] > 0
    up = FakeModelServer()
    try:
        model = ModelResource(backend="ollama", base_url=up.url, model="fake-llm", retries=0, backoff_s=0.0)
        materialize_partitions([memory_tree], ["2026-10-09"], url, folder,
                               resources=pipeline_resources(url, folder, llm=model, decision=model))
    finally:
        up.close()
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT count(*) FROM memory_tree WHERE level > 0 AND model = 'fake-llm'").fetchone()[0] > 0


def _tree_rows_of(url: str) -> dict[tuple, tuple]:
    with psycopg.connect(url) as conn:
        return _tree_rows(conn)

"""Stage `memory_tree` run directly: a session tree over each session's chunks (at most 8
children a node), a scene tree per user, an entity tree per entity of a user's graph; a run
writes only the nodes that changed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from memory_pipelines.core.temporal_tree import TreeNode
from memory_pipelines.db import tree as tree_db
from memory_pipelines.db.connection import get_pool
from memory_pipelines.stages import tree
from tests.stages.chain import SAMPLE_DAYS, rows, run_stage, run_upstream, scalar, table_contents, write_session

DAYS = ["2026-10-01", "2026-10-02"]
SHAPE = "SELECT tree_kind, tree_key, level, count(*) FROM memory_tree GROUP BY 1, 2, 3 ORDER BY 1, 2, 3"
# a node with more children than allowed, a child whose parent is not in its tree, a tree without one root
BROKEN = """
    SELECT (SELECT count(*) FROM (SELECT 1 FROM memory_tree WHERE parent_key IS NOT NULL
                                  GROUP BY tree_kind, tree_key, parent_key HAVING count(*) > %(most)s) x)
         + (SELECT count(*) FROM memory_tree c WHERE c.parent_key IS NOT NULL AND NOT EXISTS (
                SELECT 1 FROM memory_tree p WHERE (p.tree_kind, p.tree_key, p.node_key)
                                                = (c.tree_kind, c.tree_key, c.parent_key) AND p.level > c.level))
         + (SELECT count(*) FROM (SELECT 1 FROM memory_tree GROUP BY tree_kind, tree_key
                                  HAVING count(*) FILTER (WHERE parent_key IS NULL) <> 1) y)"""


def counted(report) -> tuple[int, ...]:
    c = report.counts
    return c.session_trees, c.scene_trees, c.entity_trees, c.nodes_written, c.nodes_removed


def test_a_day_writes_its_trees_the_next_only_its_path_and_fewer_children_reshape(pool, database_url, tmp_path):
    # ten chunks of two long messages for "late" (chunked on the first day); "s2" on the
    # second day names the user's employer: a relation, so an entity tree
    padding = "x" * 1400
    turns = []
    for i in range(10):
        turns += [("user", f"Question {i}: how do I set option {i} of the build? {padding}"),
                  ("assistant", f"Set build.option{i} = true in the config file. {padding}")]
    write_session(tmp_path, "late", "ann", turns, start="23:31")
    write_session(tmp_path, "s2", "ann", [("user", "I work at Orchid Labs now and my preferred editor is Helix."),
                                          ("assistant", "Noted.")], day="2026-10-02")
    run_upstream(pool, "memory_tree", DAYS, source=tmp_path)
    assert scalar(database_url, "SELECT count(*) FROM memory_chunks WHERE session_id = 'late'") == 10

    first = run_stage(pool, "memory_tree", DAYS[0])
    # 10 leaves under 2 nodes under a root; session, day, week, month; relation, day, month, year
    assert counted(first) == (1, 1, 1, 13 + 4 + 4, 0)
    assert rows(database_url, SHAPE) == [
        ("entity", "ann:ann", 0, 1), ("entity", "ann:ann", 1, 1), ("entity", "ann:ann", 2, 1),
        ("entity", "ann:ann", 3, 1),
        ("scene", "ann", 0, 1), ("scene", "ann", 1, 1), ("scene", "ann", 2, 1), ("scene", "ann", 3, 1),
        ("session", "late", 0, 10), ("session", "late", 1, 2), ("session", "late", 2, 1)]
    assert scalar(database_url, BROKEN, {"most": 8}) == 0

    # new: s2's one-chunk tree, and in the scene tree its leaf and its day; changed: the week
    # and the month above them
    second = run_stage(pool, "memory_tree", DAYS[1], run_id="day2")
    assert counted(second) == (2, 1, 1, 3 + 2, 0)
    assert scalar(database_url, "SELECT count(*) FROM memory_tree") == 21 + 3
    assert scalar(database_url, "SELECT count(*) FROM memory_tree WHERE run_id = 'day2'") == 5

    before = table_contents(database_url)
    again = run_stage(pool, "memory_tree", DAYS, run_id="again")
    assert counted(again) == (2, 1, 1, 0, 0)
    assert table_contents(database_url) == before

    narrow = run_stage(pool, "memory_tree", DAYS, run_id="narrow", settings=tree.Settings(max_children=4))
    assert counted(narrow)[:3] == (2, 1, 1) and narrow.counts.nodes_written > 0
    assert rows(database_url, "SELECT level, count(*) FROM memory_tree WHERE tree_key = 'late' GROUP BY 1 ORDER BY 1"
                ) == [(0, 10), (1, 3), (2, 1)]
    assert scalar(database_url, BROKEN, {"most": 4}) == 0

    # half the chunks gone: their leaves and the nodes over them go, and only those
    nodes = "SELECT tree_kind, tree_key, node_key FROM memory_tree"
    before = set(rows(database_url, nodes))
    with get_pool(database_url).connection() as conn:
        conn.execute("DELETE FROM memory_chunks WHERE session_id = 'late' AND start_seq > (SELECT percentile_disc(0.5) "
                     "WITHIN GROUP (ORDER BY start_seq) FROM memory_chunks WHERE session_id = 'late')")
    halved = run_stage(pool, "memory_tree", DAYS, run_id="halved", settings=tree.Settings(max_children=4))
    after = set(rows(database_url, nodes))
    assert halved.counts.nodes_removed == len(before - after) > 0
    assert rows(database_url, "SELECT level, count(*) FROM memory_tree WHERE tree_key = 'late' GROUP BY 1 ORDER BY 1"
                ) == [(0, 5), (1, 2), (2, 1)]
    assert scalar(database_url, BROKEN, {"most": 4}) == 0


def test_the_samples_trees_are_stored_as_counted(pool, database_url):
    run_upstream(pool, "memory_tree", SAMPLE_DAYS)
    report = run_stage(pool, "memory_tree", SAMPLE_DAYS)
    counts = report.counts
    assert report.failures == [] and report.calls == []  # the rules back end: extractive, no calls
    assert counts.nodes_written == scalar(database_url, "SELECT count(*) FROM memory_tree") > 0
    assert counts.nodes_removed == 0

    def trees(kind: str) -> int:
        return scalar(database_url, "SELECT count(DISTINCT tree_key) FROM memory_tree WHERE tree_kind = %s", (kind,))

    assert counts.session_trees == trees("session") == scalar(
        database_url, "SELECT count(DISTINCT session_id) FROM memory_chunks") > 0
    assert counts.scene_trees == trees("scene") == scalar(
        database_url, "SELECT count(DISTINCT user_id) FROM memory_chunks") > 1
    assert counts.entity_trees == trees("entity") > 0
    # every chunk is a leaf of its session's tree
    assert scalar(database_url, "SELECT count(*) FROM memory_tree WHERE tree_kind = 'session' AND level = 0") == scalar(
        database_url, "SELECT count(*) FROM memory_chunks")
    assert scalar(database_url, BROKEN, {"most": 8}) == 0

    before = table_contents(database_url)
    again = run_stage(pool, "memory_tree", SAMPLE_DAYS, run_id="again")
    assert counted(again) == (counts.session_trees, counts.scene_trees, counts.entity_trees, 0, 0)
    assert table_contents(database_url) == before


def test_a_node_built_twice_in_a_batch_is_stored_once_as_its_last(pool, database_url):
    at = datetime(2026, 10, 1, 9, tzinfo=UTC)
    first = TreeNode("ann", "entity", "ann:postgres", "fact:db/engine", 0, None, 0, at, at, (), ("postgres",),
                     "uses Postgres 16")
    last = replace(first, summary="uses Postgres 17")
    with pool.connection() as conn, conn.transaction():
        written, removed = tree_db.store_tree(conn, "entity", ["ann:postgres"], [first, last], "r")
    assert (written, removed) == (1, 0)
    assert rows(database_url, "SELECT node_key, summary FROM memory_tree WHERE tree_key = 'ann:postgres'") == [
        ("fact:db/engine", "uses Postgres 17")]

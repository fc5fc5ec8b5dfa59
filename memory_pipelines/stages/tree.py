"""Stage `memory_tree`: the temporal tree. Every session whose chunks the window's days'
runs wrote has its session tree built again as it is now (a session tree is built from all
its chunks, so a day-by-day run ends the same), once for the whole window; then the scene
trees of those sessions' users (and of users whose scene tree forget removed); then the
entity trees of the users whose graph, entries or facts those days wrote. Unchanged nodes
are left alone, so a new day rewrites only the nodes on its path."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import ConnectionPool

from memory_pipelines.db import repository
from memory_pipelines.db.queries import query
from memory_pipelines.stages.common import NO_BACKENDS, Backends, Counts, StageReport, Window, session_batches
from memory_pipelines.tree import MAX_CHILDREN, build_entity_tree, build_scene_tree, build_session_tree

ASSET = "memory_tree"


@dataclass(frozen=True)
class Settings:
    max_children: int = MAX_CHILDREN


@dataclass
class TreeCounts(Counts):
    session_trees: int = 0
    scene_trees: int = 0
    entity_trees: int = 0
    nodes_written: int = 0
    nodes_removed: int = 0


def run(pool: ConnectionPool, window: Window, settings: Settings = Settings(),
        backends: Backends = NO_BACKENDS) -> StageReport[TreeCounts]:
    report = StageReport(TreeCounts())
    counts = report.counts
    with pool.connection() as conn:
        sessions = [r[0] for r in conn.execute(query("sessions_to_grow"), {"first": window.first, "last": window.last})]
    for batch in session_batches(sessions):
        with pool.connection() as conn, conn.transaction():
            repository.lock_sessions(conn, batch)
            leaves = repository.sessions_chunk_leaves(conn, batch)
            nodes = [n for session_id in batch
                     for n in build_session_tree(leaves.get(session_id, []), settings.max_children)]
            written, removed = repository.store_tree(conn, "session", batch, nodes, window.run_id)
        counts.nodes_written += written
        counts.nodes_removed += removed
        counts.session_trees += sum(bool(leaves.get(s)) for s in batch)
        report.sessions.update(batch)
        report.users.update(n.user_id for n in nodes)
    with pool.connection() as conn, conn.transaction():
        users = sorted(report.users | {r[0] for r in conn.execute(query("users_without_scene_tree"))})
        roots = repository.users_session_roots(conn, users)
        scenes = [n for user_id in users for n in build_scene_tree(user_id, roots.get(user_id, []))]
        written, removed = repository.store_tree(conn, "scene", users, scenes, window.run_id)
    counts.nodes_written += written
    counts.nodes_removed += removed
    counts.scene_trees = len({n.tree_key for n in scenes})
    report.users.update(users)
    with pool.connection() as conn, conn.transaction():
        owners = [r[0] for r in conn.execute(query("users_with_entities_to_grow"),
                                             {"first": window.first, "last": window.last})]
        items = repository.users_entity_items(conn, owners)
        entities = [n for (user_id, entity), about in items.items() for n in build_entity_tree(user_id, entity, about)]
        # every entity tree of these users: one whose entity left the graph goes
        stored = [r[0] for r in conn.execute(query("user_entity_trees"), {"user_ids": owners})]
        written, removed = repository.store_tree(conn, "entity", sorted({*stored, *(n.tree_key for n in entities)}),
                                                 entities, window.run_id)
    counts.nodes_written += written
    counts.nodes_removed += removed
    counts.entity_trees = len({n.tree_key for n in entities})
    report.users.update(owners)
    report.preview = [{"tree": f"{n.tree_kind} {n.tree_key}", "node": n.node_key, "level": n.level,
                       "summary": n.summary[:120]} for n in scenes if n.parent_key is None][:5]
    report.check_scope = {"user_ids": sorted(report.users)}
    return report

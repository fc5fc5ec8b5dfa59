"""Stage `memory_tree`: the temporal tree. Every session whose chunks the window's days'
runs wrote has its session tree built again as it is now (a session tree is built from all
its chunks, so a day-by-day run ends the same), once for the whole window; then the scene
trees of those sessions' users (and of users whose scene tree forget removed); then the
entity trees of the users whose graph, entries or facts those days wrote. Unchanged nodes
are left alone, so a new day rewrites only the nodes on its path (and, with a model back
end, calls the model for those nodes only, once their period has closed)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.db import tree as tree_db
from memory_pipelines.digests import json_digest
from memory_pipelines.llm.backends import ModelError, PromptedBackend
from memory_pipelines.llm.prompts import SUMMARIZE_NODE
from memory_pipelines.stages.common import (
    NO_BACKENDS, Backends, CallContext, Counts, StageFailure, StageReport, Window, session_batches,
)
from memory_pipelines.core.temporal_tree import (
    MAX_CHILDREN, TreeNode, build_entity_tree, build_scene_tree, build_session_tree, open_periods,
)

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
    """The trees the window's days changed. With a model back end as `writer`, each new or
    changed internal node's summary is written by one call from its children's (a node
    whose children's summaries did not change keeps its own; a node over one child takes its
    child's; a day, week, month or year the user's memory has not yet moved past keeps its
    extractive summary until it closes); the rules back end's are the
    extractive ones the trees are built with. A tree whose call failed is left as stored."""
    ctx = CallContext(window.run_id, ASSET)
    writer = backends.writer if isinstance(backends.writer, PromptedBackend) else None
    report = StageReport(TreeCounts(), calls_models=writer is not None)
    counts = report.counts
    with pool.connection() as conn:
        sessions = tree_db.sessions_to_grow(conn, window.first, window.last, window.shard)
    for batch in session_batches(sessions):
        with pool.connection() as conn, conn.transaction():
            summaries_db.lock_sessions(conn, batch)
            leaves = tree_db.sessions_chunk_leaves(conn, batch)
            nodes = _summarized(conn, "session", batch, [
                n for session_id in batch for n in build_session_tree(leaves.get(session_id, []), settings.max_children)],
                writer, ctx, window.last, report)
            written, removed = tree_db.store_tree(conn, "session", batch, nodes, window.run_id)
        counts.nodes_written += written
        counts.nodes_removed += removed
        counts.session_trees += sum(bool(leaves.get(s)) for s in batch)
        report.sessions.update(batch)
        report.users.update(n.user_id for n in nodes)
    with pool.connection() as conn, conn.transaction():
        users = sorted(report.users | set(tree_db.users_without_scene_tree(conn, window.shard)))
        roots = tree_db.users_session_roots(conn, users)
        scenes = _summarized(conn, "scene", users, [
            n for user_id in users for n in build_scene_tree(user_id, roots.get(user_id, []))],
            writer, ctx, window.last, report)
        written, removed = tree_db.store_tree(conn, "scene", users, scenes, window.run_id)
    counts.nodes_written += written
    counts.nodes_removed += removed
    counts.scene_trees = len({n.tree_key for n in scenes})
    report.users.update(users)
    with pool.connection() as conn, conn.transaction():
        owners = tree_db.users_with_entities_to_grow(conn, window.first, window.last, window.shard)
        items = tree_db.users_entity_items(conn, owners)
        built = [n for (user_id, entity), about in items.items() for n in build_entity_tree(user_id, entity, about)]
        # every entity tree of these users: one whose entity left the graph goes
        keys = sorted({*tree_db.user_entity_trees(conn, owners), *(n.tree_key for n in built)})
        entities = _summarized(conn, "entity", keys, built, writer, ctx, window.last, report)
        written, removed = tree_db.store_tree(conn, "entity", keys, entities, window.run_id)
    counts.nodes_written += written
    counts.nodes_removed += removed
    counts.entity_trees = len({n.tree_key for n in entities})
    report.users.update(owners)
    report.preview = [{"tree": f"{n.tree_kind} {n.tree_key}", "node": n.node_key, "level": n.level,
                       "summary": n.summary[:120]} for n in scenes if n.parent_key is None][:5]
    report.check_scope = {"user_ids": sorted(report.users)}
    return report


def _summarized(conn: psycopg.Connection, tree_kind: str, tree_keys: Sequence[str], nodes: list[TreeNode],
                writer: PromptedBackend | None, ctx: CallContext, partition_key: str,
                report: StageReport[TreeCounts]) -> list[TreeNode]:
    """The trees' nodes with their internal nodes' summaries written by `writer`, bottom up
    (None: the extractive ones as built). A tree whose call failed keeps its stored nodes:
    its nodes are left out of what is stored, and a stage failure says why."""
    if writer is None or not nodes:
        return nodes
    stored = tree_db.tree_written_summaries(conn, tree_kind, tree_keys)
    children: dict[tuple[str, str | None], list[TreeNode]] = {}
    for node in nodes:
        children.setdefault((node.tree_key, node.parent_key), []).append(node)
    still_open = open_periods(nodes)
    done: dict[tuple[str, str], TreeNode] = {}
    failed: set[str] = set()
    calls = []
    for node in sorted(nodes, key=lambda n: n.level):
        key = (node.tree_key, node.node_key)
        if node.level == 0 or node.tree_key in failed:
            done[key] = node
            continue
        below = [done[(node.tree_key, c.node_key)] for c in sorted(children[key], key=lambda c: c.position)]
        if len(below) == 1:
            # a node over one child says what the child says: condensing it would cost a call for nothing
            done[key] = replace(node, summary=below[0].summary, model=below[0].model,
                                source_hash=below[0].source_hash)
            continue
        if key in still_open:
            # a day, week, month or year still going on: its summary would be written again with
            # each new day of it, so it keeps the extractive one until it has closed
            done[key] = node
            continue
        parts = [c.summary for c in below]
        source = json_digest([writer.name, writer.model, writer.prompt_version(SUMMARIZE_NODE), parts],
                             ensure_ascii=False)
        kept = stored.get(key)
        if kept is not None and kept[0] == source:
            summary = kept[1]
        else:
            try:
                summary, call = writer.summarize_node(parts)
            except ModelError as exc:
                calls.append(exc.call)
                failed.add(node.tree_key)
                report.failures.append(StageFailure(
                    node.tree_key if tree_kind == "session" else None, partition_key,
                    f"{tree_kind} tree {node.tree_key}, node {node.node_key}: {exc}", exc.call.budget_reached,
                    node.user_id, f"{tree_kind} tree"))
                done[key] = node
                continue
            calls.append(call)
        done[key] = replace(node, summary=summary, model=writer.model, source_hash=source)
    ctx.record(conn, calls, partition_key, None)
    report.calls.extend(calls)
    return [done[(n.tree_key, n.node_key)] for n in nodes if n.tree_key not in failed]

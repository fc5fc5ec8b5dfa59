"""The temporal tree (`sql/queries/tree.sql`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import psycopg
from psycopg.rows import dict_row, kwargs_row
from psycopg.types.json import Jsonb

from memory_pipelines.core.chunk_packing import Chunk
from memory_pipelines.core.temporal_tree import EntityItem, Span, TreeNode
from memory_pipelines.db.queries import query
from memory_pipelines.db.rows import load_rows
from memory_pipelines.records import shallow_fields
from memory_pipelines.shards import Shard


def sessions_chunk_leaves(conn: psycopg.Connection, session_ids: Sequence[str]) -> dict[str, list[Chunk]]:
    """Each session's stored chunks in seq order, with their breadcrumbs: its tree's leaves."""
    leaves: dict[str, list[Chunk]] = {}
    with conn.cursor(row_factory=kwargs_row(Chunk)) as cur:
        for leaf in cur.execute(query("sessions_chunk_leaves"), {"session_ids": list(session_ids)}):
            leaves.setdefault(leaf.session_id, []).append(replace(leaf, breadcrumbs=tuple(leaf.breadcrumbs)))
    return leaves


def _tree_node(row: dict) -> TreeNode:
    return TreeNode(**{**row, "spans": tuple(Span(**s) for s in row["spans"]), "keys": tuple(row["keys"])})


def users_session_roots(conn: psycopg.Connection, user_ids: Sequence[str]) -> dict[str, list[TreeNode]]:
    """The roots of each user's session trees, by start."""
    roots: dict[str, list[TreeNode]] = {}
    with conn.cursor(row_factory=dict_row) as cur:
        for row in cur.execute(query("users_session_roots"), {"user_ids": list(user_ids)}):
            roots.setdefault(row["user_id"], []).append(_tree_node(row))
    return roots


def users_entity_items(conn: psycopg.Connection, user_ids: Sequence[str]) -> dict[tuple[str, str], list[EntityItem]]:
    """(user, entity) -> what the user's memory holds about the entity, in time order."""
    items: dict[tuple[str, str], list[EntityItem]] = {}
    for user_id, entity, kind, item_key, at, text, keys, session_id, first, last in conn.execute(
            query("users_entity_items"), {"user_ids": list(user_ids)}):
        spans = (Span(session_id, first, last),) if session_id is not None else ()
        items.setdefault((user_id, entity), []).append(EntityItem(kind, item_key, at, spans, text, tuple(keys)))
    return items


def user_tree_nodes(conn: psycopg.Connection, user_id: str) -> list[TreeNode]:
    """Every node of the user's trees."""
    with conn.cursor(row_factory=dict_row) as cur:
        return [_tree_node(row) for row in cur.execute(query("user_tree_nodes"), {"user_id": user_id})]


def tree_nodes(conn: psycopg.Connection, user_id: str, tree_kind: str, tree_key: str) -> list[TreeNode]:
    """One tree of the user, top nodes first."""
    with conn.cursor(row_factory=dict_row) as cur:
        return [_tree_node({**row, "user_id": user_id, "tree_kind": tree_kind, "tree_key": tree_key})
                for row in cur.execute(query("tree_nodes"), {"user_id": user_id, "tree_kind": tree_kind,
                                                             "tree_key": tree_key})]


def tree_written_summaries(conn: psycopg.Connection, tree_kind: str,
                           tree_keys: Sequence[str]) -> dict[tuple[str, str], tuple[str, str]]:
    """(tree, node) -> (what its stored model-written summary was written from, the summary)."""
    return {(tree_key, node_key): (source, summary) for tree_key, node_key, source, summary in conn.execute(
        query("tree_written_summaries"), {"tree_kind": tree_kind, "tree_keys": list(tree_keys)})}


def store_tree(conn: psycopg.Connection, tree_kind: str, tree_keys: Sequence[str], nodes: Sequence[TreeNode],
               run_id: str) -> tuple[int, int]:
    """The trees' nodes as `nodes` say (unchanged ones untouched, the others' gone);
    returns (written, removed)."""
    stored = {(tree_key, node_key): digest for tree_key, node_key, digest in conn.execute(
        query("tree_hashes"), {"tree_kind": tree_kind, "tree_keys": list(tree_keys)})}
    # a key built twice keeps its last node, as upserting them one by one would
    changed = {(n.tree_key, n.node_key): n for n in nodes if stored.get((n.tree_key, n.node_key)) != n.content_hash}
    written = 0
    if changed:
        load_rows(conn, "create_tree_load", "tree_load", (
            (n.user_id, n.tree_kind, n.tree_key, n.node_key, n.level, n.parent_key, n.position, n.started_at,
             n.ended_at, Jsonb([shallow_fields(s) for s in n.spans]), list(n.keys), n.summary, n.content_hash,
             n.model, n.source_hash) for n in changed.values()))
        written = conn.execute(query("upsert_tree_from_load"), {"run_id": run_id}).rowcount
    # what was stored and is no longer built goes (read above, in this transaction)
    gone = stored.keys() - {(n.tree_key, n.node_key) for n in nodes}
    removed = conn.execute(query("delete_tree_nodes"), {
        "tree_kind": tree_kind, "tree_keys": [t for t, _ in gone],
        "node_keys": [n for _, n in gone]}).rowcount if gone else 0
    return written, removed


def sessions_to_grow(conn: psycopg.Connection, first: str, last: str, shard: Shard) -> list[str]:
    """The shard's sessions whose trees to build again for the days first..last."""
    return [r[0] for r in conn.execute(query("sessions_to_grow"), {"first": first, "last": last, **shard.params})]


def users_without_scene_tree(conn: psycopg.Connection, shard: Shard) -> list[str]:
    """The shard's users with session trees and no scene tree."""
    return [r[0] for r in conn.execute(query("users_without_scene_tree"), shard.params)]


def users_with_entities_to_grow(conn: psycopg.Connection, first: str, last: str, shard: Shard) -> list[str]:
    """The shard's users whose entity trees to build again for the days first..last."""
    return [r[0] for r in conn.execute(query("users_with_entities_to_grow"),
                                       {"first": first, "last": last, **shard.params})]


def user_entity_trees(conn: psycopg.Connection, user_ids: Sequence[str]) -> list[str]:
    """The keys of the users' stored entity trees."""
    return [r[0] for r in conn.execute(query("user_entity_trees"), {"user_ids": user_ids})]


def user_session_trees(conn: psycopg.Connection, user_id: str) -> list[str]:
    """The keys of the user's session trees, by start."""
    return [r[0] for r in conn.execute(query("user_session_trees"), {"user_id": user_id})]

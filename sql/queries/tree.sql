-- The temporal tree: memory_tree (memory_pipelines.tree, stage memory_tree).

-- name: sessions_to_grow
-- The sessions whose trees to build again for the days first..last: those whose chunks
-- those days' runs wrote (chunks are only ever removed by forget, which takes the trees).
SELECT DISTINCT session_id FROM memory_chunks WHERE partition_key BETWEEN %(first)s::text AND %(last)s::text
ORDER BY 1;

-- name: sessions_chunk_leaves
-- The sessions' chunks, as session trees read them.
SELECT session_id, user_id, start_seq, end_seq, started_at, ended_at, content, message_count, breadcrumbs
FROM memory_chunks WHERE session_id = ANY(%(session_ids)s)
ORDER BY session_id, start_seq;

-- name: tree_hashes
-- What the trees' stored nodes hold, to write only changed ones.
SELECT tree_key, node_key, content_hash FROM memory_tree
WHERE tree_kind = %(tree_kind)s AND tree_key = ANY(%(tree_keys)s);

-- name: upsert_tree_node
INSERT INTO memory_tree AS t (user_id, tree_kind, tree_key, node_key, level, parent_key, position, started_at,
                              ended_at, spans, keys, summary, content_hash, model, partition_key, run_id)
VALUES (%(user_id)s, %(tree_kind)s, %(tree_key)s, %(node_key)s, %(level)s, %(parent_key)s, %(position)s,
        %(started_at)s, %(ended_at)s, %(spans)s, %(keys)s, %(summary)s, %(content_hash)s, %(model)s,
        to_char(%(ended_at)s AT TIME ZONE 'UTC', 'YYYY-MM-DD'), %(run_id)s)
ON CONFLICT (tree_kind, tree_key, node_key) DO UPDATE
SET user_id = EXCLUDED.user_id, level = EXCLUDED.level, parent_key = EXCLUDED.parent_key,
    position = EXCLUDED.position, started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at,
    spans = EXCLUDED.spans, keys = EXCLUDED.keys, summary = EXCLUDED.summary, content_hash = EXCLUDED.content_hash,
    model = EXCLUDED.model, partition_key = EXCLUDED.partition_key, run_id = EXCLUDED.run_id
WHERE t.content_hash <> EXCLUDED.content_hash;

-- name: delete_tree_nodes_except
-- The trees' nodes no longer among the (tree, node) pairs kept.
DELETE FROM memory_tree
WHERE tree_kind = %(tree_kind)s AND tree_key = ANY(%(tree_keys)s)
  AND (tree_key, node_key) NOT IN (SELECT * FROM unnest(%(kept_trees)s::text[], %(kept_nodes)s::text[]));

-- name: users_without_scene_tree
-- Users with session trees and no scene tree (forget removed it): theirs is built again.
SELECT DISTINCT user_id FROM memory_tree s
WHERE s.tree_kind = 'session' AND s.parent_key IS NULL
  AND NOT EXISTS (SELECT 1 FROM memory_tree c WHERE c.tree_kind = 'scene' AND c.tree_key = s.user_id)
ORDER BY 1;

-- name: users_session_roots
-- The roots of the users' session trees: the scene trees' leaves (forks stay out of the
-- scene: what they hold is not the user's history until merged).
SELECT user_id, tree_kind, tree_key, node_key, level, parent_key, position, started_at, ended_at, spans, keys, summary
FROM memory_tree
WHERE tree_kind = 'session' AND user_id = ANY(%(user_ids)s) AND parent_key IS NULL
  AND NOT EXISTS (SELECT 1 FROM session_forks f WHERE f.session_id = memory_tree.tree_key)
ORDER BY user_id, started_at, tree_key;

-- name: tree_nodes
-- One tree's nodes, of its user, top first then by level and position: what `tree show` prints.
SELECT node_key, level, parent_key, position, started_at, ended_at, spans, keys, summary
FROM memory_tree
WHERE user_id = %(user_id)s AND tree_kind = %(tree_kind)s AND tree_key = %(tree_key)s
ORDER BY level DESC, started_at, position, node_key;

-- name: user_session_trees
-- The user's session trees: their keys, by start.
SELECT tree_key FROM memory_tree
WHERE user_id = %(user_id)s AND tree_kind = 'session' AND parent_key IS NULL
ORDER BY started_at, tree_key;

-- name: user_tree_nodes
-- Every node of the user's trees (scene and sessions): forest recall descends them.
SELECT user_id, tree_kind, tree_key, node_key, level, parent_key, position, started_at, ended_at, spans, keys, summary
FROM memory_tree WHERE user_id = %(user_id)s
ORDER BY tree_kind, tree_key, level DESC, position;

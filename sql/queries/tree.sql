-- The temporal tree: memory_tree (memory_pipelines.core.temporal_tree, stage memory_tree).

-- name: sessions_to_grow
-- The sessions whose trees to build again for the days first..last: those whose chunks
-- those days' runs wrote (chunks are only ever removed by forget, which takes the trees).
SELECT DISTINCT session_id FROM memory_chunks
WHERE partition_key BETWEEN %(first)s::text AND %(last)s::text AND memory_shard(user_id, %(shards)s) = %(shard)s
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

-- name: create_tree_load
-- Made once a connection, emptied by each commit and each batch (one round trip: no
-- parameters): made and dropped per batch, its catalog writes cost a long backfill more than its rows.
-- A batch's changed nodes arrive by COPY and are upserted by one statement (a statement per
-- node cost the client more than the server's upsert).
CREATE TEMP TABLE IF NOT EXISTS tree_load (
    user_id text, tree_kind text, tree_key text, node_key text, level bigint, parent_key text, position bigint,
    started_at timestamptz, ended_at timestamptz, spans jsonb, keys text[], summary text, content_hash text,
    model text, source_hash text
) ON COMMIT DELETE ROWS;
DELETE FROM tree_load;  -- a second batch in the same transaction starts empty

-- name: upsert_tree_from_load
-- The partition is the day of the node's newest turn.
INSERT INTO memory_tree AS t (user_id, tree_kind, tree_key, node_key, level, parent_key, position, started_at,
                              ended_at, spans, keys, summary, content_hash, model, source_hash, partition_key, run_id)
SELECT user_id, tree_kind, tree_key, node_key, level, parent_key, position, started_at, ended_at, spans, keys,
       summary, content_hash, model, source_hash, to_char(ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD'), %(run_id)s
FROM tree_load
ON CONFLICT (tree_kind, tree_key, node_key) DO UPDATE
SET user_id = EXCLUDED.user_id, level = EXCLUDED.level, parent_key = EXCLUDED.parent_key,
    position = EXCLUDED.position, started_at = EXCLUDED.started_at, ended_at = EXCLUDED.ended_at,
    spans = EXCLUDED.spans, keys = EXCLUDED.keys, summary = EXCLUDED.summary, content_hash = EXCLUDED.content_hash,
    model = EXCLUDED.model, source_hash = EXCLUDED.source_hash, partition_key = EXCLUDED.partition_key,
    run_id = EXCLUDED.run_id
WHERE t.content_hash <> EXCLUDED.content_hash;

-- name: delete_tree_nodes
-- The nodes at these (tree, node) pairs of one kind of tree: stored ones their trees no longer have.
DELETE FROM memory_tree t
USING unnest(%(tree_keys)s::text[], %(node_keys)s::text[]) AS gone(tree_key, node_key)
WHERE t.tree_kind = %(tree_kind)s AND t.tree_key = gone.tree_key AND t.node_key = gone.node_key;

-- name: users_without_scene_tree
-- Users with session trees and no scene tree (forget removed it): theirs is built again.
-- Of the run's shard only: another shard's user may be mid-way through a run of its own.
SELECT DISTINCT user_id FROM memory_tree s
WHERE s.tree_kind = 'session' AND s.parent_key IS NULL AND memory_shard(s.user_id, %(shards)s) = %(shard)s
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
-- Every node of the user's scene and session trees: forest recall descends them.
SELECT user_id, tree_kind, tree_key, node_key, level, parent_key, position, started_at, ended_at, spans, keys, summary
FROM memory_tree WHERE user_id = %(user_id)s AND tree_kind IN ('scene', 'session')
ORDER BY tree_kind, tree_key, level DESC, position;

-- name: users_entity_items
-- What each user's memory holds about each entity of their graph (a subject of a relation):
-- the relations it is in, the knowledge entries naming it (title or tag) and the current
-- facts whose key or value names it (`_`, `-` and spaces alike), each with the time it was
-- said and its source turns (none for rows written through the API: no session of theirs),
-- named by what it is rather than by a serial id (the same memory, the same tree).
WITH entities AS (
    SELECT DISTINCT user_id, lower(subject) AS entity, translate(lower(subject), '_ ', '--') AS spelled
    FROM entity_graph WHERE user_id = ANY(%(user_ids)s)
), items AS (
    SELECT e.user_id, e.entity, 'relation' AS kind,
           g.subject || ' ' || g.relation || ' ' || g.object || '@' || to_char(g.valid_from AT TIME ZONE 'UTC',
                                                                             'YYYY-MM-DD"T"HH24:MI:SS') AS item_key,
           g.valid_from AS at, g.session_id, g.seq_start, g.seq_end,
           g.subject || ' ' || g.relation || ' ' || g.object
               || CASE WHEN g.valid_until IS NOT NULL THEN ' (until ' || to_char(g.valid_until, 'YYYY-MM-DD') || ')'
                       ELSE '' END AS text,
           ARRAY[g.relation] AS keys
    FROM entities e
    JOIN entity_graph g ON g.user_id = e.user_id AND (lower(g.subject) = e.entity OR lower(g.object) = e.entity)
    UNION ALL
    SELECT e.user_id, e.entity, 'entry', left(k.entry_key, 16), k.updated_at, k.session_id, k.seq_start, k.seq_end,
           CASE WHEN strpos(k.content, k.title) = 1 THEN k.content ELSE k.title || ': ' || k.content END,
           ARRAY[k.kind] || k.tags
    FROM entities e
    JOIN knowledge_entries k ON k.user_id = e.user_id
     AND (strpos(translate(lower(k.title), '_ ', '--'), e.spelled) > 0
          OR EXISTS (SELECT 1 FROM unnest(k.tags) AS tag WHERE translate(lower(tag), '_ ', '--') = e.spelled))
    UNION ALL
    SELECT e.user_id, e.entity, 'fact', f.category || '/' || f.key, f.last_verified_at, f.session_id, f.seq_start,
           f.seq_end,
           f.category || '/' || f.key || ': ' || f.value, ARRAY[f.category]
    FROM entities e
    JOIN memory_facts f ON f.user_id = e.user_id AND f.merged_into IS NULL
     AND (strpos(translate(lower(f.key), '_ ', '--'), e.spelled) > 0
          OR strpos(translate(lower(f.value), '_ ', '--'), e.spelled) > 0)
)
SELECT i.user_id, i.entity, i.kind, i.item_key, i.at, i.text, i.keys,
       CASE WHEN EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = i.session_id AND s.user_id = i.user_id)
            THEN i.session_id END AS session_id, i.seq_start, i.seq_end
FROM items i
ORDER BY i.user_id, i.entity, i.at, i.kind, i.item_key;

-- name: users_with_entities_to_grow
-- The users whose graph, entries or facts the days' runs wrote: their entity trees are built
-- again; and users with a graph but no entity tree (forget took theirs). Of the run's shard.
SELECT user_id FROM (
    SELECT user_id FROM entity_graph WHERE partition_key BETWEEN %(first)s::text AND %(last)s::text
    UNION
    SELECT DISTINCT g.user_id FROM entity_graph g
    WHERE NOT EXISTS (SELECT 1 FROM memory_tree t WHERE t.user_id = g.user_id AND t.tree_kind = 'entity')
    UNION
    SELECT user_id FROM knowledge_entries
    WHERE user_id IS NOT NULL AND partition_key BETWEEN %(first)s::text AND %(last)s::text
    UNION
    SELECT user_id FROM memory_facts WHERE partition_key BETWEEN %(first)s::text AND %(last)s::text
) touched
WHERE memory_shard(user_id, %(shards)s) = %(shard)s
ORDER BY 1;

-- name: user_entity_trees
-- The users' stored entity trees (their keys).
SELECT DISTINCT tree_key FROM memory_tree WHERE tree_kind = 'entity' AND user_id = ANY(%(user_ids)s);

-- name: tree_written_summaries
-- The model-written summaries of the trees' nodes, with what each was written from.
SELECT tree_key, node_key, source_hash, summary FROM memory_tree
WHERE tree_kind = %(tree_kind)s AND tree_key = ANY(%(tree_keys)s) AND source_hash IS NOT NULL;

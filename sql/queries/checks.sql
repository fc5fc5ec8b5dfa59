-- Data-quality checks: the rows in scope of the partition(s) a run materialized, with what
-- each expectation tests computed per row (memory_pipelines/checks.py). Computed booleans
-- are never NULL: great-expectations skips NULLs in a set expectation.

-- name: message_check_rows
-- The window's messages and every message of the sessions this run wrote into; a message
-- this run wrote must lie in the window.
SELECT m.session_id, m.seq, m.user_id, m.role, m.source_file, m.source_line, m.ingested_run_id, m.content_hash,
       (m.ingested_run_id IS DISTINCT FROM %(run_id)s OR (m.ts >= %(start)s AND m.ts < %(end)s)) AS in_window
FROM messages m
WHERE (m.ts >= %(start)s AND m.ts < %(end)s AND memory_shard(m.user_id, %(shards)s) = %(shard)s) OR m.session_id = ANY(%(session_ids)s);

-- name: session_check_rows
-- Each session with messages in the window or written by this run, against all its messages.
SELECT a.session_id,
       coalesce(a.users = 1 AND a.user_id = s.user_id, false) AS single_user,
       coalesce(s.message_count = a.messages AND s.first_message_at = a.first_ts AND s.last_active = a.last_ts,
                false) AS counts_match
FROM (SELECT session_id, count(DISTINCT user_id) AS users, min(user_id) AS user_id, count(*) AS messages,
             min(ts) AS first_ts, max(ts) AS last_ts
      FROM messages
      WHERE session_id IN (SELECT session_id FROM messages
                           WHERE ts >= %(start)s AND ts < %(end)s AND memory_shard(user_id, %(shards)s) = %(shard)s)
         OR session_id = ANY(%(session_ids)s)
      GROUP BY session_id) a
LEFT JOIN sessions s USING (session_id);

-- name: quarantine_check_rows
-- The partition's (or run's) refusals still open: those a later run resolved are not counted.
SELECT q.source_file, q.source_line, q.reason, q.raw_md5, q.detail, q.run_id
FROM quarantine q
WHERE (q.partition_key = %(partition_label)s OR q.run_id = %(run_id)s) AND q.resolved_at IS NULL;

-- name: segment_check_rows
-- The partition's segments. Confidence is a real: the threshold is compared as one too.
SELECT c.segment_id, c.confidence,
       (NOT c.dropped OR (c.is_noise AND c.judge_status = 'ok' AND c.noise_reason IS NOT NULL
                          AND c.confidence >= %(drop_threshold)s::real)) AS dropped_with_reason,
       (c.start_seq <= c.end_seq AND c.started_at <= c.ended_at) AS span_ordered,
       (c.started_at >= c.partition_key::date::timestamp AT TIME ZONE 'UTC'
        AND c.ended_at < (c.partition_key::date + 1)::timestamp AT TIME ZONE 'UTC') AS within_day,
       (EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = c.session_id AND s.user_id = c.user_id)
        AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = c.session_id
                        AND m.seq BETWEEN c.start_seq AND c.end_seq AND m.user_id <> c.user_id)) AS single_user
FROM conversation_segments c
WHERE c.partition_key = ANY(%(partition_keys)s) AND memory_shard(c.user_id, %(shards)s) = %(shard)s;

-- name: summary_check_rows
-- The current summary of every session with messages in the window.
SELECT s.session_id, s.summary::text AS summary, s.version, s.cursor_seq, s.cursor_ts, s.partition_key, s.run_id,
       coalesce(s.cursor_seq <= (SELECT max(m.seq) FROM messages m WHERE m.session_id = s.session_id),
                false) AS cursor_in_session,
       EXISTS (SELECT 1 FROM sessions o WHERE o.session_id = s.session_id AND o.user_id = s.user_id) AS session_user,
       s.version IS NOT DISTINCT FROM (SELECT max(v.version) FROM session_summary_versions v
                                       WHERE v.session_id = s.session_id) AS latest_version
FROM session_summaries s
WHERE s.session_id IN (SELECT session_id FROM messages WHERE ts >= %(start)s AND ts < %(end)s)
  AND memory_shard(s.user_id, %(shards)s) = %(shard)s;

-- name: summary_version_check_rows
-- Versions built for the partition's days, and those this run rebuilt on later days.
SELECT v.session_id, v.version, v.summary::text AS summary,
       coalesce(v.first_seq <= v.last_seq AND v.last_seq <= v.cursor_seq,
                v.first_seq IS NULL AND v.last_seq IS NULL) AS span_ordered,
       coalesce(v.cursor_seq <= (SELECT max(m.seq) FROM messages m WHERE m.session_id = v.session_id),
                false) AS cursor_in_session,
       EXISTS (SELECT 1 FROM sessions o WHERE o.session_id = v.session_id AND o.user_id = v.user_id) AS session_user
FROM session_summary_versions v
WHERE (v.partition_key = ANY(%(partition_keys)s) OR v.run_id = %(run_id)s) AND memory_shard(v.user_id, %(shards)s) = %(shard)s;

-- name: fact_check_rows
-- The facts of the users a run wrote.
SELECT f.id, f.user_id, f.category, f.key, f.confidence, f.session_id, f.seq_start, f.seq_end, f.run_id,
       f.model, f.prompt_version, f.merged_into IS NULL AS visible,
       (f.merged_into IS NULL OR EXISTS (
            SELECT 1 FROM memory_facts t WHERE t.id = f.merged_into AND t.merged_into IS NULL
                                           AND t.user_id = f.user_id)) AS merge_target_visible,
       f.seq_end >= f.seq_start AS span_ordered,
       -- a fact saved through the API (model 'api') names no session of the archive
       f.model = 'api' OR EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = f.session_id
                                                          AND s.user_id = f.user_id) AS same_user
FROM memory_facts f
WHERE f.user_id = ANY(%(user_ids)s);

-- name: chunk_check_rows
-- The chunks of the sessions a run wrote chunks for.
SELECT c.id, c.session_id, c.run_id, c.model, c.prompt_version, c.content_hash,
       (length(c.content) <= %(chunk_max)s
        OR (c.message_count = 1 AND length(c.content) <= %(chunk_single_max)s)) AS within_cap,
       coalesce(c.start_seq >= b.first_seq AND c.end_seq <= b.last_seq AND c.start_seq <= c.end_seq,
                false) AS span_in_session,
       coalesce(c.user_id = b.user_id AND b.users = 1, false) AS same_user
FROM memory_chunks c
LEFT JOIN (SELECT session_id, min(seq) AS first_seq, max(seq) AS last_seq, min(user_id) AS user_id,
                  count(DISTINCT user_id) AS users
           FROM messages WHERE session_id = ANY(%(session_ids)s) GROUP BY session_id) b USING (session_id)
WHERE c.session_id = ANY(%(session_ids)s);

-- name: sketch_check_rows
-- The partition's scratchpad notes (notes written through the query module have no partition).
SELECT k.id, k.scope, k.source, k.source_seq,
       k.scope_key = CASE k.scope WHEN 'session' THEN k.session_id ELSE '' END AS scope_key_matches,
       EXISTS (SELECT 1 FROM messages m WHERE m.session_id = k.session_id AND m.seq = k.source_seq
                                          AND m.user_id = k.user_id) AS written_by_user
FROM sketches k
WHERE k.partition_key = ANY(%(partition_keys)s) AND memory_shard(k.user_id, %(shards)s) = %(shard)s;

-- name: entry_check_rows
SELECT e.id, e.kind, e.scope, e.consent_basis, e.confidence, e.importance, e.session_id, e.run_id, e.model,
       e.prompt_version,
       e.seq_start <= e.seq_end AS span_ordered,
       CASE WHEN e.scope = 'global' THEN e.user_id IS NULL
            WHEN e.model = 'api' THEN e.user_id IS NOT NULL  -- distilled through the API: no archived session
            ELSE EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = e.session_id AND s.user_id = e.user_id)
       END AS session_user,
       CASE e.scope WHEN 'entity' THEN e.scope_id IS NOT DISTINCT FROM e.user_id
                    WHEN 'session' THEN e.scope_id IS NOT DISTINCT FROM e.session_id
                    WHEN 'global' THEN e.scope_id IS NULL
                    ELSE e.scope_id IS NOT NULL END AS scope_id_matches
FROM knowledge_entries e
WHERE (e.partition_key = ANY(%(partition_keys)s) OR e.run_id = %(run_id)s) AND memory_shard(e.user_id, %(shards)s) = %(shard)s;

-- name: graph_check_rows
-- The partition's triples and the older triples they closed.
SELECT g.id, g.confidence, g.session_id, g.run_id, g.model, g.prompt_version,
       g.seq_start <= g.seq_end AS span_ordered,
       EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = g.session_id AND s.user_id = g.user_id) AS session_user,
       (g.valid_until IS NULL OR g.valid_until > g.valid_from) AS validity_ordered,
       ((g.closed_by IS NULL) = (g.valid_until IS NULL) AND (g.closed_by IS NULL OR EXISTS (
            SELECT 1 FROM entity_graph n
            WHERE n.id = g.closed_by AND n.user_id = g.user_id AND lower(n.subject) = lower(g.subject)
              AND n.relation = g.relation AND n.valid_from = g.valid_until))) AS closed_by_same_user
FROM entity_graph g
WHERE (g.partition_key = ANY(%(partition_keys)s)
       OR g.closed_by IN (SELECT id FROM entity_graph WHERE partition_key = ANY(%(partition_keys)s)))
  AND memory_shard(g.user_id, %(shards)s) = %(shard)s;

-- name: error_check_rows
SELECT e.id, e.tool, e.error, e.fix,
       (btrim(e.tool) <> '' AND btrim(e.error) <> '' AND btrim(e.fix) <> '') AS texts_present,
       e.error_seq < e.fix_seq AS span_ordered,
       e.expires_at > e.observed_at AS expires_after_seen,
       EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = e.session_id AND s.user_id = e.user_id) AS session_user
FROM error_memory e
WHERE (e.partition_key = ANY(%(partition_keys)s) OR e.run_id = %(run_id)s) AND memory_shard(e.user_id, %(shards)s) = %(shard)s;

-- name: embedding_check_rows
-- The rows search serves from the partition and every row this run embedded (the id lists
-- are named after their tables), next to the configured model and dimension.
SELECT r.source_table, r.id, r.embedding_model, r.dimension, %(model)s::text AS current_model,
       %(dimension)s::integer AS current_dimension
FROM (SELECT 'memory_facts' AS source_table, id, embedding_model, vector_dims(embedding) AS dimension
      FROM memory_facts
      WHERE merged_into IS NULL AND (partition_key = ANY(%(partition_keys)s) OR id = ANY(%(memory_facts)s))
        AND memory_shard(user_id, %(shards)s) = %(shard)s
      UNION ALL
      SELECT 'memory_chunks', id, embedding_model, vector_dims(embedding)
      FROM memory_chunks
      WHERE (partition_key = ANY(%(partition_keys)s) OR id = ANY(%(memory_chunks)s)) AND memory_shard(user_id, %(shards)s) = %(shard)s
      UNION ALL
      SELECT 'knowledge_entries', id, embedding_model, vector_dims(embedding)
      FROM knowledge_entries
      WHERE (partition_key = ANY(%(partition_keys)s) OR id = ANY(%(knowledge_entries)s)) AND memory_shard(user_id, %(shards)s) = %(shard)s
      UNION ALL
      SELECT 'memory_turns', id, embedding_model, vector_dims(embedding)
      FROM memory_turns
      WHERE (partition_key = ANY(%(partition_keys)s) OR id = ANY(%(memory_turns)s)) AND memory_shard(user_id, %(shards)s) = %(shard)s) r;

-- name: turn_check_rows
-- The turns of the sessions a run indexed, next to the messages they stand for.
SELECT t.session_id, t.seq, t.role, t.language,
       coalesce(t.user_id = s.user_id, false) AS session_user,
       m.seq IS NOT NULL AND m.role = t.role AS has_message,
       count(*) OVER (PARTITION BY t.session_id, t.pos) = 1 AS pos_unique
FROM memory_turns t
LEFT JOIN sessions s ON s.session_id = t.session_id
LEFT JOIN messages m ON m.session_id = t.session_id AND m.seq = t.seq
WHERE t.session_id = ANY(%(session_ids)s);

-- name: archive_check_rows
SELECT a.source_table, a.source_id, a.reason,
       (a.row_data ->> 'id')::bigint IS NOT DISTINCT FROM a.source_id AS row_matches_source,
       a.user_id IS NOT DISTINCT FROM a.row_data ->> 'user_id' AS same_user,
       NOT CASE a.source_table
           WHEN 'knowledge_entries' THEN EXISTS (SELECT 1 FROM knowledge_entries t WHERE t.id = a.source_id)
           WHEN 'memory_facts' THEN EXISTS (SELECT 1 FROM memory_facts t WHERE t.id = a.source_id)
           WHEN 'error_memory' THEN EXISTS (SELECT 1 FROM error_memory t WHERE t.id = a.source_id)
           ELSE false END AS out_of_source
FROM memory_archive a
WHERE a.partition_key = ANY(%(partition_keys)s) AND memory_shard(a.user_id, %(shards)s) = %(shard)s;

-- name: tree_check_rows
-- The trees of the users a run grew: each node under a parent one level up (or a top
-- node), its spans turns of its own user's sessions (an entity tree's leaf written through
-- the API has none), a session tree's leaf a chunk's span.
SELECT t.tree_kind, t.tree_key, t.node_key,
       t.parent_key IS NULL OR coalesce(p.level = t.level + 1, false) AS parent_above,
       -- a span's session looked up by its key (a join here was planned as a scan of every
       -- session per node: 6.6 s at 37k nodes, 0.3 s this way)
       (jsonb_array_length(t.spans) > 0 OR t.tree_kind = 'entity') AND NOT EXISTS (
           SELECT 1 FROM jsonb_to_recordset(t.spans) AS sp(session_id text, seq_start bigint, seq_end bigint)
           WHERE sp.seq_end < sp.seq_start
              OR NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = sp.session_id AND s.user_id = t.user_id)
       ) AS spans_of_user,
       t.tree_kind <> 'session' OR t.level > 0 OR EXISTS (
           SELECT 1 FROM memory_chunks c
           WHERE c.session_id = t.tree_key AND c.start_seq = (t.spans -> 0 ->> 'seq_start')::bigint
             AND c.end_seq = (t.spans -> 0 ->> 'seq_end')::bigint) AS leaf_is_chunk
FROM memory_tree t
LEFT JOIN memory_tree p ON p.tree_kind = t.tree_kind AND p.tree_key = t.tree_key AND p.node_key = t.parent_key
WHERE t.user_id = ANY(%(user_ids)s);

-- name: check_rows_plan
-- Frames read every row in scope: an index scan in key order would make each row a random
-- heap read (a year's 5M messages: tens of minutes); a bitmap or sequential scan and a sort
-- take seconds.
SET LOCAL enable_indexscan = off;

-- name: check_rows_ordered
-- A check's rows (one of the queries above) in the order they are cut into frames.
SELECT * FROM ({rows}) AS q ORDER BY {columns};

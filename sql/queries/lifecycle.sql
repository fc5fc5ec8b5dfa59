-- name: newest_message_before
-- The shard's clock: the newest conversation time the pipeline has seen before a window's
-- end (decay's "as of" for rows of no user, and whether anything happened since).
SELECT max(ts) FROM messages WHERE ts < %(before)s AND memory_shard(user_id, %(shards)s) = %(shard)s;

-- name: user_clocks
-- Each user's "now": their newest message before a moment (conversation time). Memory ages
-- by its owner's clock, never by another user's activity (messages_user_ts_idx, a user each).
SELECT u.user_id, (SELECT max(m.ts) FROM messages m WHERE m.user_id = u.user_id AND m.ts < %(before)s)
FROM unnest(%(user_ids)s::text[]) AS u(user_id);

-- name: decay_knowledge_candidates
-- (ids given: only those rows, as they are now)
SELECT 'knowledge_entries' AS source_table, id, entry_key AS key, user_id, title || ' ' || content AS text, importance,
       updated_at AS seen_at, access_count, last_accessed_at, valid_until, has_pii, run_id
FROM knowledge_entries WHERE updated_at <= %(as_of)s AND (%(user_id)s::text IS NULL OR user_id = %(user_id)s)
  AND memory_shard(user_id, %(shards)s) = %(shard)s AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s))
ORDER BY id;

-- name: decay_fact_candidates
-- Visible facts only: hidden rows go with their survivor.
SELECT 'memory_facts' AS source_table, id, key, user_id, category || ' ' || key || ': ' || value AS text,
       (confidence / 100.0)::float8 AS importance, last_verified_at AS seen_at, access_count, last_accessed_at,
       expires_at AS valid_until, false AS has_pii, run_id
FROM memory_facts WHERE merged_into IS NULL AND last_verified_at <= %(as_of)s
                   AND (%(user_id)s::text IS NULL OR user_id = %(user_id)s) AND memory_shard(user_id, %(shards)s) = %(shard)s
                   AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s))
ORDER BY id;

-- name: graph_statements
-- The entity graph of these users (or everyone's): what each memory states, and the newer
-- object that closed a statement.
SELECT g.user_id, g.subject, g.relation, g.object, g.valid_from, g.valid_until, n.object AS closed_by_object
FROM entity_graph g LEFT JOIN entity_graph n ON n.id = g.closed_by
WHERE %(all_users)s OR g.user_id = ANY(%(user_ids)s)
ORDER BY g.id;

-- name: decay_error_candidates
-- Error memories seen by as_of and not stored by this run: each expires once its user's own
-- clock (their newest message) passes its TTL.
SELECT id, tool AS key, user_id, observed_at, expires_at
FROM error_memory
WHERE observed_at <= %(as_of)s AND run_id <> %(run_id)s AND memory_shard(user_id, %(shards)s) = %(shard)s
  AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s))
ORDER BY id;

-- name: newest_messages_by_user_day
-- Each of the shard's users' newest message of each UTC day in a window, oldest first: every
-- clock decay reads over a range of days, in one read (messages_ts_idx).
SELECT user_id, max(ts) AS ts
FROM messages
WHERE ts >= %(start)s AND ts < %(end)s AND memory_shard(user_id, %(shards)s) = %(shard)s
GROUP BY user_id, (ts AT TIME ZONE 'UTC')::date
ORDER BY 2, 1;

-- name: archive_rows
-- Each row with the moment it was judged from (its user's clock).
INSERT INTO memory_archive (source_table, source_id, source_key, user_id, session_id, reason, score, as_of,
                            row_data, partition_key, run_id)
SELECT %(table)s, t.id, r.key, t.user_id, t.session_id, r.reason, r.score, r.as_of, to_jsonb(t),
       %(partition_key)s, %(run_id)s
FROM {table} AS t
JOIN jsonb_to_recordset(%(rows)s) AS r(id bigint, key text, reason text, score real, as_of timestamptz) ON r.id = t.id
ON CONFLICT (source_table, source_id) DO NOTHING;

-- name: archive_hidden_facts
-- The hidden rows merged into the facts archived (`rows`), with their survivor's moment.
INSERT INTO memory_archive (source_table, source_id, source_key, user_id, session_id, reason, score, as_of,
                            row_data, partition_key, run_id)
SELECT 'memory_facts', t.id, t.key, t.user_id, t.session_id, 'merged_with', NULL, r.as_of, to_jsonb(t),
       %(partition_key)s, %(run_id)s
FROM memory_facts t JOIN jsonb_to_recordset(%(rows)s) AS r(id bigint, as_of timestamptz) ON t.merged_into = r.id
ON CONFLICT (source_table, source_id) DO NOTHING;

-- name: delete_hidden_facts_of
DELETE FROM memory_facts WHERE merged_into = ANY(%(ids)s);

-- name: delete_rows
DELETE FROM {table} WHERE id = ANY(%(ids)s);

-- name: archive_entry
SELECT id, source_table, source_id, row_data FROM memory_archive WHERE id = %(id)s;

-- name: archive_followers
SELECT id, source_table, source_id, row_data FROM memory_archive
WHERE source_table = 'memory_facts' AND reason = 'merged_with' AND (row_data ->> 'merged_into')::bigint = %(source_id)s;

-- name: archived_fact_keys
-- The users' (category, key) pairs that decay ever archived: only their candidates can
-- have an archived copy to bring back.
SELECT DISTINCT user_id, row_data ->> 'category', row_data ->> 'key' FROM memory_archive
WHERE source_table = 'memory_facts' AND reason <> 'merged_with' AND user_id = ANY(%(user_ids)s);

-- name: archived_facts_reobserved
-- Archived copies of a fact observed again after it was last verified, with no live row
-- in its place (followers come back with their survivor).
SELECT a.id FROM memory_archive a
WHERE a.source_table = 'memory_facts' AND a.reason <> 'merged_with' AND a.user_id = %(user_id)s
  AND a.row_data ->> 'category' = %(category)s AND a.row_data ->> 'key' = %(key)s
  AND (a.row_data ->> 'last_verified_at')::timestamptz < %(observed_at)s
  AND NOT EXISTS (SELECT 1 FROM memory_facts f
                  WHERE f.user_id = %(user_id)s AND f.category = %(category)s AND f.key = %(key)s)
ORDER BY a.id;

-- name: archived_entries_reobserved
-- Archived copies of a knowledge entry observed again after its last update, with no live
-- entry of that key.
SELECT a.id FROM memory_archive a
WHERE a.source_table = 'knowledge_entries' AND a.source_key = %(entry_key)s
  AND (a.row_data ->> 'updated_at')::timestamptz < %(observed_at)s
  AND NOT EXISTS (SELECT 1 FROM knowledge_entries e WHERE e.entry_key = %(entry_key)s)
ORDER BY a.id;

-- name: restore_row
INSERT INTO {table} SELECT * FROM jsonb_populate_record(NULL::{table}, %(row)s);

-- name: delete_archive_row
DELETE FROM memory_archive WHERE id = %(id)s;

-- name: forget_session_ids
SELECT session_id FROM sessions WHERE user_id = %(user_id)s AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s)
UNION
SELECT DISTINCT session_id FROM messages WHERE user_id = %(user_id)s
  AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s)
UNION
-- a session's forks go with it (their summaries hold the turns they share), and forks
-- made by `fork` with no turns yet
SELECT session_id FROM session_forks WHERE user_id = %(user_id)s
  AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s OR parent_session_id = %(session_id)s);

-- name: forget_unhide_facts
-- Rows of other sessions hidden behind a forgotten fact stand again.
UPDATE memory_facts SET merged_into = NULL
WHERE merged_into IN (SELECT id FROM memory_facts WHERE user_id = %(user_id)s AND session_id = ANY(%(session_ids)s))
  AND NOT session_id = ANY(%(session_ids)s);

-- name: record_forgotten
INSERT INTO forgotten (user_id, session_id) VALUES (%(user_id)s, %(session_key)s)
ON CONFLICT (user_id, session_id) DO UPDATE SET forgotten_at = now();

-- name: unforget
DELETE FROM forgotten WHERE user_id = %(user_id)s AND session_id = %(session_key)s;

-- name: forgotten_for
SELECT user_id, session_id FROM forgotten WHERE user_id = ANY(%(user_ids)s);

-- name: export_entries
SELECT id, entry_key, user_id, kind, title, content, tags, confidence, importance, scope, scope_id, consent_basis,
       has_pii, valid_from, valid_until, version, created_at, updated_at, session_id, seq_start, seq_end,
       partition_key, run_id, model, prompt_version
FROM knowledge_entries
WHERE %(user_id)s::text IS NULL OR user_id = %(user_id)s OR scope = 'global'
ORDER BY kind, title, id;

-- Forgetting: one DELETE per table, through the lineage columns. The whole_user parameter
-- is true for `forget --user`, false for `forget --session` (only those sessions' rows go).

-- name: forget_memory_facts_hidden
DELETE FROM memory_facts WHERE user_id = %(user_id)s AND session_id = ANY(%(session_ids)s) AND merged_into IS NOT NULL;
-- name: forget_memory_facts
DELETE FROM memory_facts WHERE user_id = %(user_id)s AND (%(whole_user)s OR session_id = ANY(%(session_ids)s));
-- name: forget_memory_fact_rejections
DELETE FROM memory_fact_rejections WHERE user_id = %(user_id)s AND (%(whole_user)s OR session_id = ANY(%(session_ids)s));
-- name: forget_memory_summary
DELETE FROM memory_summary WHERE user_id = %(user_id)s;
-- name: forget_session_memory_state
DELETE FROM session_memory_state WHERE session_id = ANY(%(session_ids)s);
-- name: forget_memory_chunks
DELETE FROM memory_chunks WHERE user_id = %(user_id)s AND session_id = ANY(%(session_ids)s);
-- name: forget_memory_turns
DELETE FROM memory_turns WHERE user_id = %(user_id)s AND session_id = ANY(%(session_ids)s);
-- name: forget_memory_tree
-- The sessions' trees and the user's scene and entity trees (their nodes condense every
-- session's: the next run builds them again from what is left).
DELETE FROM memory_tree WHERE user_id = %(user_id)s
  AND (tree_kind IN ('scene', 'entity') OR tree_key = ANY(%(session_ids)s));
-- name: forget_memory_turn_stats
DELETE FROM memory_turn_stats WHERE user_id = %(user_id)s;
-- name: forget_sketches
DELETE FROM sketches WHERE user_id = %(user_id)s AND (%(whole_user)s OR session_id = ANY(%(session_ids)s));
-- name: forget_recall_ledger
DELETE FROM recall_ledger WHERE session_id = ANY(%(session_ids)s);
-- name: forget_knowledge_sources
DELETE FROM knowledge_sources WHERE session_id = ANY(%(session_ids)s);
-- name: forget_knowledge_entry_versions
DELETE FROM knowledge_entry_versions WHERE (user_id = %(user_id)s AND %(whole_user)s) OR session_id = ANY(%(session_ids)s);
-- name: forget_knowledge_entries
DELETE FROM knowledge_entries WHERE (user_id = %(user_id)s AND %(whole_user)s) OR session_id = ANY(%(session_ids)s);
-- name: forget_entity_graph
DELETE FROM entity_graph WHERE user_id = %(user_id)s AND (%(whole_user)s OR session_id = ANY(%(session_ids)s));
-- name: forget_error_memory
DELETE FROM error_memory WHERE user_id = %(user_id)s AND (%(whole_user)s OR session_id = ANY(%(session_ids)s));
-- name: forget_memory_archive
DELETE FROM memory_archive WHERE (user_id = %(user_id)s AND %(whole_user)s) OR session_id = ANY(%(session_ids)s);
-- name: forget_session_summary_versions
DELETE FROM session_summary_versions WHERE session_id = ANY(%(session_ids)s);
-- name: forget_session_summaries
DELETE FROM session_summaries WHERE session_id = ANY(%(session_ids)s);
-- name: forget_conversation_segments
DELETE FROM conversation_segments WHERE session_id = ANY(%(session_ids)s);
-- name: forget_llm_calls
DELETE FROM llm_calls WHERE session_id = ANY(%(session_ids)s);
-- name: forget_quarantine
DELETE FROM quarantine WHERE session_id = ANY(%(session_ids)s);
-- name: forget_superseded_messages
DELETE FROM superseded_messages WHERE user_id = %(user_id)s AND session_id = ANY(%(session_ids)s);
-- name: forget_session_merges
DELETE FROM session_merges g WHERE user_id = %(user_id)s
  AND (fork_session_id = ANY(%(session_ids)s) OR parent_session_id = ANY(%(session_ids)s))
  AND NOT EXISTS (SELECT 1 FROM superseded_messages x WHERE x.merge_id = g.id);
-- name: forget_session_forks
DELETE FROM session_forks WHERE user_id = %(user_id)s AND session_id = ANY(%(session_ids)s);
-- name: forget_messages
DELETE FROM messages WHERE user_id = %(user_id)s AND session_id = ANY(%(session_ids)s);
-- name: forget_sessions
DELETE FROM sessions WHERE user_id = %(user_id)s AND session_id = ANY(%(session_ids)s);

-- name: pii_entries
SELECT id, entry_key, user_id, kind, title, pii_kinds, updated_at FROM knowledge_entries
WHERE has_pii AND (%(user_id)s::text IS NULL OR user_id = %(user_id)s)
ORDER BY updated_at, id;

-- name: archived_rows
-- The archive, filtered (every filter optional); `label` is what the row was about.
SELECT id, source_table, source_id, source_key, user_id, session_id, reason, score, as_of, archived_at, run_id,
       coalesce(row_data ->> 'title', row_data ->> 'key', row_data ->> 'tool', '') AS label
FROM memory_archive
WHERE (%(reason)s::text IS NULL OR reason = %(reason)s)
  AND (%(since)s::timestamptz IS NULL OR archived_at >= %(since)s)
  AND (%(run_id)s::text IS NULL OR run_id = %(run_id)s)
  AND (%(user_id)s::text IS NULL OR user_id = %(user_id)s)
  AND (cardinality(%(ids)s::bigint[]) = 0 OR id = ANY(%(ids)s))
  AND (%(with_followers)s OR reason <> 'merged_with')
ORDER BY id
LIMIT %(limit)s;

-- name: touch_restored
-- A row restored by hand counts as accessed now, so decay does not take it again at once.
UPDATE {table} SET last_accessed_at = greatest(last_accessed_at, now()) WHERE id = %(id)s;

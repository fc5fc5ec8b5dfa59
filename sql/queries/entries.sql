-- name: archived_entry_newer
-- An entry decay archived stays archived unless it is observed again later: its archive
-- row, when it was last updated at or after this observation.
SELECT id, reason, score, as_of, partition_key, run_id FROM memory_archive
WHERE source_table = 'knowledge_entries' AND source_key = %(entry_key)s
  AND (row_data ->> 'updated_at')::timestamptz >= %(observed_at)s;

-- name: archived_entry_keys
-- The keys among these that decay ever archived: only their entries need the archive's rules.
SELECT DISTINCT source_key FROM memory_archive
WHERE source_table = 'knowledge_entries' AND source_key = ANY(%(entry_keys)s);

-- name: upsert_knowledge_version
INSERT INTO knowledge_entry_versions AS v (entry_key, content_hash, user_id, title, content, tags, confidence,
    observed_at, session_id, seq_start, seq_end, partition_key, run_id, call_id)
VALUES (%(entry_key)s, %(content_hash)s, %(user_id)s, %(title)s, %(content)s, %(tags)s, %(confidence)s,
        %(observed_at)s, %(session_id)s, %(seq_start)s, %(seq_end)s, %(partition_key)s, %(run_id)s, %(call_id)s)
ON CONFLICT (entry_key, content_hash) DO UPDATE
SET observed_at = EXCLUDED.observed_at, session_id = EXCLUDED.session_id, seq_start = EXCLUDED.seq_start,
    seq_end = EXCLUDED.seq_end, partition_key = EXCLUDED.partition_key, run_id = EXCLUDED.run_id,
    call_id = EXCLUDED.call_id
WHERE EXCLUDED.observed_at < v.observed_at;  -- a version dates from its first observation

-- name: create_entry_load
-- Made once a connection, emptied by each commit and each batch (one round trip: no
-- parameters): made and dropped per batch, its catalog writes cost a long backfill more than its rows.
-- A batch's entries arrive by COPY and are upserted a round at a time (a statement may not
-- update one row twice: round n holds each key's n-th observation of the batch, in order).
CREATE TEMP TABLE IF NOT EXISTS entry_load (
    ord bigint, round bigint, entry_key text, content_hash text, user_id text, kind text, title text, content text, tags text[],
    confidence double precision, importance double precision, scope text, scope_id text, consent_basis text, has_pii boolean,
    pii_kinds text[], observed_at timestamptz, valid_until timestamptz, session_id text, seq_start bigint,
    seq_end bigint, partition_key text, run_id text, model text, prompt_version text, call_id text
) ON COMMIT DELETE ROWS;
DELETE FROM entry_load;  -- a second batch in the same transaction starts empty

-- name: upsert_versions_from_load
-- The load's versions, as upserting its rows one by one in order would leave them: a
-- (key, content) pair's row holds what its first row says and the observation of its
-- earliest (the first of those in order), which an older stored one keeps.
INSERT INTO knowledge_entry_versions AS v (entry_key, content_hash, user_id, title, content, tags, confidence,
    observed_at, session_id, seq_start, seq_end, partition_key, run_id, call_id)
SELECT f.entry_key, f.content_hash, f.user_id, f.title, f.content, f.tags, f.confidence, o.observed_at,
       o.session_id, o.seq_start, o.seq_end, o.partition_key, o.run_id, o.call_id
FROM (SELECT DISTINCT ON (entry_key, content_hash) * FROM entry_load ORDER BY entry_key, content_hash, ord) f
JOIN (SELECT DISTINCT ON (entry_key, content_hash) * FROM entry_load
      ORDER BY entry_key, content_hash, observed_at, ord) o USING (entry_key, content_hash)
ON CONFLICT (entry_key, content_hash) DO UPDATE
SET observed_at = EXCLUDED.observed_at, session_id = EXCLUDED.session_id, seq_start = EXCLUDED.seq_start,
    seq_end = EXCLUDED.seq_end, partition_key = EXCLUDED.partition_key, run_id = EXCLUDED.run_id,
    call_id = EXCLUDED.call_id
WHERE EXCLUDED.observed_at < v.observed_at;

-- name: upsert_entries_from_load
-- The same key again updates the entry in place when the observation is newer (event
-- time wins); its version is the number of distinct contents it has had. In load order, so
-- new entries get their ids in the order they were first observed.
INSERT INTO knowledge_entries AS e (entry_key, user_id, kind, title, content, tags, confidence, importance, scope,
    scope_id, consent_basis, has_pii, pii_kinds, valid_from, valid_until, version, created_at, updated_at,
    session_id, seq_start, seq_end, partition_key, run_id, model, prompt_version, call_id)
SELECT l.entry_key, l.user_id, l.kind, l.title, l.content, l.tags, l.confidence, l.importance, l.scope, l.scope_id,
       l.consent_basis, l.has_pii, l.pii_kinds, l.observed_at, l.valid_until,
       (SELECT count(*) FROM knowledge_entry_versions v WHERE v.entry_key = l.entry_key), l.observed_at,
       l.observed_at, l.session_id, l.seq_start, l.seq_end, l.partition_key, l.run_id, l.model, l.prompt_version,
       l.call_id
FROM entry_load l
WHERE l.round = %(round)s
ORDER BY l.ord
ON CONFLICT (entry_key) DO UPDATE
SET title = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.title ELSE e.title END,
    content = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.content ELSE e.content END,
    tags = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.tags ELSE e.tags END,
    confidence = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.confidence ELSE e.confidence END,
    importance = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.importance ELSE e.importance END,
    has_pii = e.has_pii OR EXCLUDED.has_pii,
    pii_kinds = ARRAY(SELECT DISTINCT unnest(e.pii_kinds || EXCLUDED.pii_kinds) ORDER BY 1),
    valid_until = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.valid_until ELSE e.valid_until END,
    version = EXCLUDED.version,
    created_at = least(e.created_at, EXCLUDED.created_at),
    valid_from = least(e.valid_from, EXCLUDED.valid_from),
    updated_at = greatest(e.updated_at, EXCLUDED.updated_at),
    session_id = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.session_id ELSE e.session_id END,
    seq_start = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.seq_start ELSE e.seq_start END,
    seq_end = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.seq_end ELSE e.seq_end END,
    partition_key = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.partition_key ELSE e.partition_key END,
    run_id = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.run_id ELSE e.run_id END,
    call_id = CASE WHEN EXCLUDED.updated_at > e.updated_at THEN EXCLUDED.call_id ELSE e.call_id END,
    -- new content or tags: the old embedding no longer describes the entry
    embedding = CASE WHEN EXCLUDED.updated_at > e.updated_at
                      AND (EXCLUDED.content, EXCLUDED.tags) IS DISTINCT FROM (e.content, e.tags)
                     THEN NULL ELSE e.embedding END,
    embedding_model = CASE WHEN EXCLUDED.updated_at > e.updated_at
                            AND (EXCLUDED.content, EXCLUDED.tags) IS DISTINCT FROM (e.content, e.tags)
                           THEN NULL ELSE e.embedding_model END
WHERE EXCLUDED.updated_at > e.updated_at OR EXCLUDED.created_at < e.created_at OR EXCLUDED.version <> e.version
   OR (EXCLUDED.has_pii AND NOT e.has_pii);

-- name: insert_relation
INSERT INTO entity_graph (user_id, subject, relation, object, confidence, valid_from, session_id, seq_start,
    seq_end, partition_key, run_id, model, prompt_version, call_id)
VALUES (%(user_id)s, %(subject)s, %(relation)s, %(object)s, %(confidence)s, %(valid_from)s, %(session_id)s,
        %(seq_start)s, %(seq_end)s, %(partition_key)s, %(run_id)s, %(model)s, %(prompt_version)s, %(call_id)s)
ON CONFLICT (user_id, subject, relation, object, valid_from) DO NOTHING;

-- name: close_contradicted
-- For a one-value relation, the first later triple with another object closes a triple's
-- validity; the order in which triples arrived does not matter.
UPDATE entity_graph g
SET valid_until = n.valid_from, closed_by = n.id
FROM entity_graph g0
LEFT JOIN LATERAL (
    SELECT id, valid_from FROM entity_graph x
    WHERE x.user_id = g0.user_id AND lower(x.subject) = lower(g0.subject) AND x.relation = g0.relation
      AND x.valid_from > g0.valid_from AND x.object <> g0.object
    ORDER BY x.valid_from, x.id LIMIT 1
) n ON true
WHERE g.id = g0.id AND g0.user_id = %(user_id)s AND lower(g0.subject) = lower(%(subject)s)
  AND g0.relation = %(relation)s
  AND (g.valid_until IS DISTINCT FROM n.valid_from OR g.closed_by IS DISTINCT FROM n.id);

-- name: upsert_error_memory
INSERT INTO error_memory AS e (user_id, tool, error, fix, error_hash, session_id, error_seq, fix_seq, observed_at,
    expires_at, partition_key, run_id)
VALUES (%(user_id)s, %(tool)s, %(error)s, %(fix)s, %(error_hash)s, %(session_id)s, %(error_seq)s, %(fix_seq)s,
        %(observed_at)s, %(expires_at)s, %(partition_key)s, %(run_id)s)
ON CONFLICT (user_id, tool, error_hash) DO UPDATE
SET fix = EXCLUDED.fix, session_id = EXCLUDED.session_id, error_seq = EXCLUDED.error_seq, fix_seq = EXCLUDED.fix_seq,
    observed_at = EXCLUDED.observed_at, expires_at = greatest(e.expires_at, EXCLUDED.expires_at),
    partition_key = EXCLUDED.partition_key, run_id = EXCLUDED.run_id
WHERE EXCLUDED.observed_at > e.observed_at;

-- name: tool_failure_days
-- The UTC days in [start, end) with a failed tool call, each with its sessions (forks left
-- out: what the user's memory learns from them comes with a merge).
SELECT DISTINCT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, session_id FROM messages
WHERE ts >= %(start)s AND ts < %(end)s AND role = 'tool' AND (metadata ->> 'is_error')::boolean
  AND memory_shard(user_id, %(shards)s) = %(shard)s
  AND NOT EXISTS (SELECT 1 FROM session_forks f WHERE f.session_id = messages.session_id)
ORDER BY 1, 2;

-- name: graph_relations
-- One hop around an entity (or every triple), optionally valid at a moment.
SELECT id, subject, relation, object, confidence, valid_from, valid_until, session_id, seq_start, seq_end
FROM entity_graph
WHERE user_id = %(user_id)s
  AND (%(entity)s::text IS NULL OR lower(subject) = lower(%(entity)s) OR lower(object) = lower(%(entity)s))
  AND (%(relation)s::text IS NULL OR relation = %(relation)s)
  AND (%(at)s::timestamptz IS NULL OR (valid_from <= %(at)s AND (valid_until IS NULL OR valid_until > %(at)s)))
ORDER BY CASE WHEN %(at)s::timestamptz IS NOT NULL THEN -confidence END, valid_from, id;

-- name: knowledge_source_fingerprints
-- What each session-day's stored entries were synthesized from.
SELECT k.partition_key, k.session_id, k.fingerprint
FROM unnest(%(partition_keys)s::text[], %(session_ids)s::text[]) AS d(partition_key, session_id)
JOIN knowledge_sources k USING (partition_key, session_id);

-- name: summaries_as_of_sessions
-- Each session's newest summary version up to the day (sessions without one left out).
SELECT DISTINCT ON (session_id) session_id, version, summary FROM session_summary_versions
WHERE session_id = ANY(%(session_ids)s) AND partition_key <= %(partition_key)s
ORDER BY session_id, version DESC;

-- name: record_knowledge_source
INSERT INTO knowledge_sources (session_id, partition_key, fingerprint, entries, run_id)
VALUES (%(session_id)s, %(partition_key)s, %(fingerprint)s, %(entries)s, %(run_id)s)
ON CONFLICT (session_id, partition_key) DO UPDATE
SET fingerprint = EXCLUDED.fingerprint, entries = EXCLUDED.entries, run_id = EXCLUDED.run_id;

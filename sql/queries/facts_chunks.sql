-- name: sessions_due_for_extraction
-- Stale as of the window's end (last activity before stale_before) and never extracted,
-- or extracted before its last activity. Activity counts only messages sent before the end.
-- With fresh_since, only sessions with a message sent in [fresh_since, stale_before): those
-- gone stale since then (a day after one whose due sessions were all taken).
-- Forks are left out: their facts join the user's when a merge brings their turns home.
WITH activity AS (
    SELECT session_id, min(user_id) AS user_id, max(ts) AS last_ts, max(seq) AS last_seq
    FROM messages
    WHERE ts < %(end)s AND session_id NOT LIKE 'temp-%%' AND memory_shard(user_id, %(shards)s) = %(shard)s
      AND NOT EXISTS (SELECT 1 FROM session_forks f WHERE f.session_id = messages.session_id)
      AND (%(fresh_since)s::timestamptz IS NULL OR session_id IN (
           SELECT fresh.session_id FROM messages fresh
           WHERE fresh.ts >= %(fresh_since)s AND fresh.ts < %(stale_before)s))
    GROUP BY session_id
)
SELECT a.session_id, a.user_id, a.last_ts, a.last_seq
FROM activity a
LEFT JOIN session_memory_state s USING (session_id)
WHERE a.last_ts < %(stale_before)s AND (s.session_id IS NULL OR s.extracted_through < a.last_ts)
ORDER BY a.session_id;

-- name: sessions_messages
-- The messages of several sessions sent before the end (every one: end NULL), by session and seq.
SELECT session_id, seq, user_id, role, content, ts, content_hash, source_file, source_line,
       agent_id, tool_name, tool_args, tool_call_id, metadata
FROM messages
WHERE session_id = ANY(%(session_ids)s) AND (%(end)s::timestamptz IS NULL OR ts < %(end)s)
ORDER BY session_id, seq;

-- name: dropped_seqs
-- The sessions' messages noise judging dropped on the days asked, with the day.
SELECT c.session_id, c.partition_key, s.seq FROM conversation_segments c
JOIN LATERAL generate_series(c.start_seq, c.end_seq) AS s(seq) ON true
WHERE c.session_id = ANY(%(session_ids)s) AND c.dropped AND c.partition_key = ANY(%(partition_keys)s::text[]);

-- name: sessions_judging_failed
-- The sessions of which a day up to this partition kept everything because judging failed.
SELECT DISTINCT session_id FROM conversation_segments
WHERE session_id = ANY(%(session_ids)s) AND partition_key <= %(partition_key)s AND judge_status = 'failed';

-- name: lock_users
-- Serializes writes of a user's facts (released at the end of the transaction); several are
-- taken in user order, so two transactions locking overlapping sets never deadlock.
SELECT pg_advisory_xact_lock(hashtext('memory_pipelines.user'), hashtext(user_id))
FROM (SELECT DISTINCT user_id FROM unnest(%(user_ids)s::text[]) AS u(user_id) ORDER BY user_id) ordered;

-- name: try_lock_sessions_and_users
-- The locks of lock_sessions and lock_users, each taken only when no other transaction holds
-- it: true when every one was taken (a transaction already holding locks waits for no
-- more, so locks taken out of order never deadlock).
SELECT coalesce(bool_and(taken), true) FROM (
    SELECT pg_try_advisory_xact_lock(hashtext('memory_pipelines.session'), hashtext(session_id)) AS taken
    FROM unnest(%(session_ids)s::text[]) AS s(session_id)
    UNION ALL
    SELECT pg_try_advisory_xact_lock(hashtext('memory_pipelines.user'), hashtext(user_id))
    FROM unnest(%(user_ids)s::text[]) AS u(user_id)
) AS locks;

-- name: create_fact_load
-- Made once a connection, emptied by each commit and each batch (one round trip: no
-- parameters): made and dropped per batch, its catalog writes cost a long backfill more than its rows.
-- A batch's facts arrive by COPY and are upserted a round at a time (a statement may not
-- update one row twice: round n holds each key's n-th observation of the batch, in order).
CREATE TEMP TABLE IF NOT EXISTS fact_load (
    ord bigint, round bigint, user_id text, category text, key text, canonical_key text, value text, source text,
    confidence bigint, last_verified_at timestamptz, source_context text, session_id text, seq_start bigint,
    seq_end bigint, partition_key text, run_id text, model text, prompt_version text, expires_at timestamptz,
    call_id text
) ON COMMIT DELETE ROWS;
DELETE FROM fact_load;  -- a second batch in the same transaction starts empty

-- name: upsert_facts_from_load
-- Event time wins: an observation older than the stored one changes nothing; an equal
-- row is not rewritten, so re-running leaves the table as it was. A new value drops the
-- embedding of the old one, so the next embedding run embeds what search will match. In
-- load order, so new facts get their ids in the order they were first observed.
INSERT INTO memory_facts AS f (user_id, category, key, canonical_key, value, source, confidence, last_verified_at,
    source_context, session_id, seq_start, seq_end, partition_key, run_id, model, prompt_version, expires_at, call_id)
SELECT user_id, category, key, canonical_key, value, source, confidence, last_verified_at, source_context,
       session_id, seq_start, seq_end, partition_key, run_id, model, prompt_version, expires_at, call_id
FROM fact_load
WHERE round = %(round)s
ORDER BY ord
ON CONFLICT (user_id, category, key) DO UPDATE
SET value = EXCLUDED.value, source = EXCLUDED.source, confidence = EXCLUDED.confidence,
    last_verified_at = EXCLUDED.last_verified_at, source_context = EXCLUDED.source_context,
    expires_at = EXCLUDED.expires_at,
    session_id = EXCLUDED.session_id, seq_start = EXCLUDED.seq_start, seq_end = EXCLUDED.seq_end,
    partition_key = EXCLUDED.partition_key, run_id = EXCLUDED.run_id, model = EXCLUDED.model,
    prompt_version = EXCLUDED.prompt_version, call_id = EXCLUDED.call_id, updated_at = now(),
    embedding = CASE WHEN EXCLUDED.value = f.value THEN f.embedding END,
    embedding_model = CASE WHEN EXCLUDED.value = f.value THEN f.embedding_model END
WHERE EXCLUDED.last_verified_at > f.last_verified_at
   OR (EXCLUDED.last_verified_at = f.last_verified_at
       AND (f.value, f.source, f.session_id, f.seq_start) IS DISTINCT FROM
           (EXCLUDED.value, EXCLUDED.source, EXCLUDED.session_id, EXCLUDED.seq_start)
       AND (EXCLUDED.session_id, EXCLUDED.seq_start, EXCLUDED.value) > (f.session_id, f.seq_start, f.value));

-- name: merge_fact_families
-- Rows whose keys are spellings of one key form a family: the most recently seen one is
-- visible, the others point at it. A row being hidden loses its embedding (search never
-- reads it, and whether it had one would depend on when the embedder last ran); undoing a
-- merge leaves it missing, so the next embedding run fills it in.
-- The families are given as (user, canonical key) pairs.
WITH ranked AS (
    SELECT id, first_value(id) OVER (PARTITION BY user_id, category, canonical_key
                                     ORDER BY last_verified_at DESC, key) AS survivor
    FROM memory_facts
    WHERE (user_id, canonical_key) IN (SELECT * FROM unnest(%(user_ids)s::text[], %(canonical_keys)s::text[]))
)
UPDATE memory_facts f
SET merged_into = NULLIF(r.survivor, f.id), updated_at = now(),
    embedding = CASE WHEN r.survivor = f.id THEN f.embedding END,
    embedding_model = CASE WHEN r.survivor = f.id THEN f.embedding_model END
FROM ranked r
WHERE f.id = r.id AND f.merged_into IS DISTINCT FROM NULLIF(r.survivor, f.id);

-- name: insert_fact_rejection
INSERT INTO memory_fact_rejections (user_id, session_id, item, reason, partition_key, run_id, model, prompt_version,
    call_id)
VALUES (%(user_id)s, %(session_id)s, %(item)s, %(reason)s, %(partition_key)s, %(run_id)s, %(model)s,
        %(prompt_version)s, %(call_id)s)
ON CONFLICT (session_id, item, reason) DO NOTHING;

-- name: mark_session_extracted
INSERT INTO session_memory_state AS s (session_id, user_id, extracted_through, extracted_seq, extracted_at,
    facts_accepted, facts_rejected, partition_key, run_id)
VALUES (%(session_id)s, %(user_id)s, %(extracted_through)s, %(extracted_seq)s, %(extracted_at)s,
        %(facts_accepted)s, %(facts_rejected)s, %(partition_key)s, %(run_id)s)
ON CONFLICT (session_id) DO UPDATE
SET extracted_through = EXCLUDED.extracted_through, extracted_seq = EXCLUDED.extracted_seq,
    extracted_at = EXCLUDED.extracted_at, facts_accepted = EXCLUDED.facts_accepted,
    facts_rejected = EXCLUDED.facts_rejected, partition_key = EXCLUDED.partition_key, run_id = EXCLUDED.run_id;

-- name: visible_facts
SELECT id, category, key, value, source, confidence, last_verified_at, source_context, merged_into,
       session_id, seq_start, seq_end, model, prompt_version
FROM memory_facts
WHERE user_id = %(user_id)s AND (%(include_merged)s OR merged_into IS NULL)
ORDER BY category, key;

-- name: users_with_outdated_memory_summary
-- Users whose visible facts changed after their memory_summary was written (or who have
-- none): what an earlier failed or budget-stopped rewrite left behind.
SELECT f.user_id FROM memory_facts f LEFT JOIN memory_summary s USING (user_id)
WHERE f.merged_into IS NULL AND memory_shard(f.user_id, %(shards)s) = %(shard)s
GROUP BY f.user_id, s.updated_at
HAVING s.updated_at IS NULL OR max(f.updated_at) > s.updated_at
ORDER BY 1;

-- name: memory_summary_hashes
-- What each user's memory_summary was written from (users without one left out).
SELECT user_id, facts_hash FROM memory_summary WHERE user_id = ANY(%(user_ids)s);

-- name: visible_facts_of_users
-- (category, key, value) of each user's visible facts, by user, category and key.
SELECT user_id, category, key, value FROM memory_facts
WHERE user_id = ANY(%(user_ids)s) AND merged_into IS NULL
ORDER BY user_id, category, key;

-- name: upsert_memory_summary
INSERT INTO memory_summary AS s (user_id, content, fact_count, facts_hash, model, prompt_version, run_id)
VALUES (%(user_id)s, %(content)s, %(fact_count)s, %(facts_hash)s, %(model)s, %(prompt_version)s, %(run_id)s)
ON CONFLICT (user_id) DO UPDATE
SET content = EXCLUDED.content, fact_count = EXCLUDED.fact_count, facts_hash = EXCLUDED.facts_hash,
    model = EXCLUDED.model, prompt_version = EXCLUDED.prompt_version, run_id = EXCLUDED.run_id, updated_at = now();

-- name: delete_fact_hidden_rows
DELETE FROM memory_facts WHERE merged_into = %(id)s;

-- name: delete_fact
DELETE FROM memory_facts WHERE id = %(id)s AND user_id = %(user_id)s;

-- name: find_fact
SELECT id FROM memory_facts
WHERE user_id = %(user_id)s AND key = %(key)s AND (%(category)s::text IS NULL OR category = %(category)s)
  AND merged_into IS NULL;

-- name: create_chunk_load
-- Made once a connection, emptied by each commit and each batch (one round trip: no
-- parameters): made and dropped per batch, its catalog writes cost a long backfill more than its rows.
-- A day's new chunks arrive by COPY and are inserted by one statement.
CREATE TEMP TABLE IF NOT EXISTS chunk_load (
    ord bigint, user_id text, session_id text, start_seq bigint, end_seq bigint, started_at timestamptz,
    ended_at timestamptz, content text, content_hash text, breadcrumbs text[], message_count bigint,
    summary_version bigint, partition_key text, run_id text, model text, prompt_version text
) ON COMMIT DELETE ROWS;
DELETE FROM chunk_load;  -- a second batch in the same transaction starts empty

-- name: insert_chunks_from_load
-- In load order, so ids go as inserting one by one gives them (a content twice: the first stays).
INSERT INTO memory_chunks (user_id, session_id, start_seq, end_seq, started_at, ended_at, content, content_hash,
    breadcrumbs, message_count, summary_version, partition_key, run_id, model, prompt_version)
SELECT user_id, session_id, start_seq, end_seq, started_at, ended_at, content, content_hash, breadcrumbs,
       message_count, summary_version, partition_key, run_id, model, prompt_version
FROM chunk_load ORDER BY ord
ON CONFLICT (session_id, content_hash) DO NOTHING;

-- name: chunk_window_states
-- Per session, as of the day's end: the last activity, the last seq out of the context window
-- (the window+1-th newest message) and the last seq already chunked.
SELECT a.session_id, s.last_ts, s.eligible, coalesce(w.watermark, -1) AS watermark
FROM unnest(%(session_ids)s::text[]) AS a(session_id)
CROSS JOIN LATERAL (SELECT max(ts) AS last_ts, (array_agg(seq ORDER BY seq DESC))[%(window)s + 1] AS eligible
                    FROM messages m WHERE m.session_id = a.session_id AND m.ts < %(end)s) s
CROSS JOIN LATERAL (SELECT max(end_seq) AS watermark FROM memory_chunks c WHERE c.session_id = a.session_id) w
ORDER BY a.session_id;


-- name: sessions_summarized_short
-- Sessions whose summary as of the day has not reached their last reply (assistant or tool)
-- sent before the end: their memory is written with the summary, so extraction waits for it.
-- A trailing user message has no reply yet and is summarized, with its memory, once one comes.
SELECT a.session_id, v.cursor_seq, r.last_reply
FROM unnest(%(session_ids)s::text[]) AS a(session_id)
CROSS JOIN LATERAL (SELECT max(m.seq) AS last_reply FROM messages m
                    WHERE m.session_id = a.session_id AND m.ts < %(end)s AND m.role IN ('assistant', 'tool')) r
LEFT JOIN LATERAL (SELECT v.cursor_seq FROM session_summary_versions v
                   WHERE v.session_id = a.session_id AND v.partition_key <= %(partition_key)s
                   ORDER BY v.version DESC LIMIT 1) v ON true
WHERE r.last_reply > coalesce(v.cursor_seq, -1);

-- name: sessions_with_undistilled_chunks
-- Sessions with chunk versions summarized before distillation calls wrote a chunk's memory
-- (no memory_items: migration 0023) that hold messages not yet extracted: the first such day.
SELECT v.session_id, min(v.partition_key)
FROM session_summary_versions v
LEFT JOIN session_memory_state s USING (session_id)
WHERE v.session_id = ANY(%(session_ids)s) AND v.kind = 'chunk' AND v.memory_items IS NULL
  AND v.partition_key <= %(through)s AND v.last_seq > coalesce(s.extracted_seq, -1)
GROUP BY 1;

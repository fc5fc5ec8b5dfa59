-- name: insert_llm_call
INSERT INTO llm_calls (run_id, asset, partition_key, session_id, purpose, backend, model, prompt_version,
                       input_tokens, output_tokens, tokens_estimated, latency_ms, attempts, status, error, cost_usd,
                       schema_retried, call_id)
VALUES (%(run_id)s, %(asset)s, %(partition_key)s, %(session_id)s, %(purpose)s, %(backend)s, %(model)s,
        %(prompt_version)s, %(input_tokens)s, %(output_tokens)s, %(tokens_estimated)s, %(latency_ms)s,
        %(attempts)s, %(status)s, %(error)s, %(cost_usd)s, %(schema_retried)s, %(call_id)s);

-- name: run_tokens_spent
SELECT coalesce(sum(input_tokens + output_tokens), 0)::bigint FROM llm_calls WHERE run_id = %(run_id)s;

-- name: messages_in_window
-- Messages of non-temp sessions sent in [start, end), by session and seq.
SELECT session_id, seq, user_id, role, content, ts, content_hash, source_file, source_line,
       agent_id, tool_name, tool_args, tool_call_id, metadata
FROM messages
WHERE ts >= %(start)s AND ts < %(end)s AND session_id NOT LIKE 'temp-%%' AND memory_shard(user_id, %(shards)s) = %(shard)s
ORDER BY session_id, seq;

-- name: sessions_messages_after
-- Each session's messages after its own seq and sent before the end (every one: end NULL),
-- by session and seq.
SELECT m.session_id, m.seq, m.user_id, m.role, m.content, m.ts, m.content_hash, m.source_file, m.source_line,
       m.agent_id, m.tool_name, m.tool_args, m.tool_call_id, m.metadata
FROM messages m
JOIN unnest(%(session_ids)s::text[], %(after_seqs)s::bigint[]) AS c(session_id, after_seq) USING (session_id)
WHERE m.seq > c.after_seq AND (%(end)s::timestamptz IS NULL OR m.ts < %(end)s)
ORDER BY m.session_id, m.seq;

-- name: active_days
-- The UTC days in [start, end) on which a message was sent, or on which one sent at most
-- `reach` before the day began goes stale: the days a stage has work on.
WITH spans AS (
    SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date AS first_day, ((ts + %(reach)s) AT TIME ZONE 'UTC')::date AS last_day
    FROM messages
    WHERE ts >= %(start)s::timestamptz - %(reach)s AND ts < %(end)s AND memory_shard(user_id, %(shards)s) = %(shard)s
)
SELECT DISTINCT to_char(day, 'YYYY-MM-DD')
FROM spans, generate_series(first_day, last_day, interval '1 day') AS day
WHERE day >= (%(start)s AT TIME ZONE 'UTC')::date AND day < (%(end)s AT TIME ZONE 'UTC')::date;

-- name: sessions_in_window
SELECT DISTINCT session_id, user_id FROM messages
WHERE ts >= %(start)s AND ts < %(end)s AND session_id NOT LIKE 'temp-%%' AND memory_shard(user_id, %(shards)s) = %(shard)s
ORDER BY session_id;

-- name: segment_fingerprints
-- The fingerprint of each (session, day)'s judgement, when every segment of it was judged and
-- all carry the same one (session-days never judged left out).
SELECT c.session_id, c.partition_key, min(c.fingerprint)
FROM conversation_segments c
JOIN unnest(%(session_ids)s::text[], %(partition_keys)s::text[]) AS d (session_id, partition_key)
  ON c.session_id = d.session_id AND c.partition_key = d.partition_key
GROUP BY c.session_id, c.partition_key
HAVING bool_and(c.judge_status = 'ok') AND count(DISTINCT c.fingerprint) = 1;

-- name: delete_session_days_segments
-- The segments of these (session, partition key) pairs: those judged again.
DELETE FROM conversation_segments c
USING unnest(%(session_ids)s::text[], %(partition_keys)s::text[]) AS d(session_id, partition_key)
WHERE c.session_id = d.session_id AND c.partition_key = d.partition_key;

-- name: create_segment_load
-- Made once a connection, emptied by each commit and each batch (one round trip: no
-- parameters): made and dropped per batch, its catalog writes cost a long backfill more than its rows.
-- Judged segments arrive by COPY and are inserted by one statement (a statement per
-- session-day cost the client more than the server's insert).
CREATE TEMP TABLE IF NOT EXISTS segment_load (
    segment_id text, session_id text, user_id text, partition_key text, start_seq bigint, end_seq bigint,
    started_at timestamptz, ended_at timestamptz, message_count bigint, chars bigint, is_noise boolean,
    noise_reason text, confidence double precision, dropped boolean, judge_status text, judge_error text, judge_backend text,
    judge_model text, prompt_version text, fingerprint text, run_id text
) ON COMMIT DELETE ROWS;
DELETE FROM segment_load;  -- a second batch in the same transaction starts empty

-- name: insert_segments_from_load
INSERT INTO conversation_segments (segment_id, session_id, user_id, partition_key, start_seq, end_seq, started_at,
    ended_at, message_count, chars, is_noise, noise_reason, confidence, dropped, judge_status, judge_error,
    judge_backend, judge_model, prompt_version, fingerprint, run_id)
SELECT segment_id, session_id, user_id, partition_key, start_seq, end_seq, started_at, ended_at, message_count, chars,
       is_noise, noise_reason, confidence, dropped, judge_status, judge_error, judge_backend, judge_model,
       prompt_version, fingerprint, run_id
FROM segment_load;

-- name: lock_sessions
-- Serializes work on sessions across runs (released at the end of the transaction); several
-- are taken in session order, so two runs locking overlapping sets never deadlock.
SELECT pg_advisory_xact_lock(hashtext('memory_pipelines.session'), hashtext(session_id))
FROM (SELECT DISTINCT session_id FROM unnest(%(session_ids)s::text[]) AS s(session_id) ORDER BY session_id) ordered;

-- name: summary_states_before
-- Each session's latest version built for a day before the range.
SELECT DISTINCT ON (session_id) session_id, version, summary, cursor_seq, cursor_ts, fingerprint
FROM session_summary_versions
WHERE session_id = ANY(%(session_ids)s) AND partition_key < %(partition_key)s
ORDER BY session_id, version DESC;

-- name: fork_seed_states
-- A fork's fold starts from its parent's state at the fork point: the parent's latest
-- version whose cursor is at or before fork_seq (so nothing after it), for forks among these.
SELECT DISTINCT ON (f.session_id) f.session_id, v.version, v.summary, v.cursor_seq, v.cursor_ts, v.fingerprint
FROM session_forks f
JOIN session_summary_versions v ON v.session_id = f.parent_session_id AND v.cursor_seq <= f.fork_seq
WHERE f.session_id = ANY(%(session_ids)s)
ORDER BY f.session_id, v.version DESC;

-- name: fork_inherited_messages
-- The parent turns a fork's fold reads as its own first ones: after the fork's cursor, up
-- to the fork point, less what judging dropped from the parent; by fork and seq, named by
-- the fork.
SELECT f.session_id, m.seq, m.user_id, m.role, m.content, m.ts, m.content_hash, m.source_file, m.source_line,
       m.agent_id, m.tool_name, m.tool_args, m.tool_call_id, m.metadata
FROM unnest(%(session_ids)s::text[], %(after_seqs)s::bigint[]) AS c(session_id, after_seq)
JOIN session_forks f ON f.session_id = c.session_id
JOIN messages m ON m.session_id = f.parent_session_id AND m.seq > c.after_seq AND m.seq <= f.fork_seq
WHERE NOT EXISTS (SELECT 1 FROM conversation_segments g
                  WHERE g.session_id = m.session_id AND g.dropped AND m.seq BETWEEN g.start_seq AND g.end_seq)
ORDER BY f.session_id, m.seq;

-- name: legacy_summaries
-- Summaries imported without versions (and possibly without a cursor).
SELECT s.session_id, s.summary, s.cursor_seq, s.cursor_ts FROM session_summaries s
WHERE s.session_id = ANY(%(session_ids)s)
  AND NOT EXISTS (SELECT 1 FROM session_summary_versions v WHERE v.session_id = s.session_id);

-- name: summary_versions_from
SELECT session_id, version, partition_key, step, step_count, fingerprint, summary, cursor_seq, cursor_ts
FROM session_summary_versions
WHERE session_id = ANY(%(session_ids)s) AND partition_key >= %(partition_key)s
ORDER BY session_id, version;

-- name: delete_summary_versions_from
DELETE FROM session_summary_versions
WHERE session_id = %(session_id)s
  AND (partition_key > %(partition_key)s OR (partition_key = %(partition_key)s AND step >= %(step)s));

-- name: create_version_load
-- Made once a connection, emptied by each commit and each batch (one round trip: no
-- parameters): made and dropped per batch, its catalog writes cost a long backfill more than its rows.
-- A slice's built versions arrive by COPY and are inserted by one statement (a statement per
-- version, and one refreshing its session's current summary, cost the client more than the
-- server's inserts).
CREATE TEMP TABLE IF NOT EXISTS version_load (
    session_id text, version bigint, user_id text, partition_key text, step bigint, step_count bigint, kind text,
    summary jsonb, cursor_ts timestamptz, cursor_seq bigint, first_seq bigint, last_seq bigint, messages_in bigint,
    trimmed jsonb, backend text, model text, prompt_version text, fingerprint text, run_id text, memory_items jsonb,
    call_id text
) ON COMMIT DELETE ROWS;
DELETE FROM version_load;  -- a second batch in the same transaction starts empty

-- name: insert_versions_from_load
INSERT INTO session_summary_versions (session_id, version, user_id, partition_key, step, step_count, kind, summary,
    cursor_ts, cursor_seq, first_seq, last_seq, messages_in, trimmed, backend, model, prompt_version, fingerprint,
    run_id, memory_items, call_id)
SELECT session_id, version, user_id, partition_key, step, step_count, kind, summary, cursor_ts, cursor_seq,
       first_seq, last_seq, messages_in, trimmed, backend, model, prompt_version, fingerprint, run_id, memory_items,
       call_id
FROM version_load;

-- name: refresh_current_summaries
-- session_summaries follows each session's latest version; unchanged rows are not written.
INSERT INTO session_summaries AS s (session_id, user_id, summary, cursor_ts, cursor_seq, version, partition_key, run_id)
SELECT v.session_id, v.user_id, v.summary, v.cursor_ts, v.cursor_seq, v.version, v.partition_key, v.run_id
FROM unnest(%(session_ids)s::text[]) AS u(session_id)
CROSS JOIN LATERAL (SELECT * FROM session_summary_versions v WHERE v.session_id = u.session_id
                    ORDER BY v.version DESC LIMIT 1) v
ON CONFLICT (session_id) DO UPDATE
SET user_id = EXCLUDED.user_id, summary = EXCLUDED.summary, cursor_ts = EXCLUDED.cursor_ts,
    cursor_seq = EXCLUDED.cursor_seq, version = EXCLUDED.version, partition_key = EXCLUDED.partition_key,
    run_id = EXCLUDED.run_id, updated_at = now()
WHERE (s.summary, s.cursor_seq, s.version, s.partition_key) IS DISTINCT FROM
      (EXCLUDED.summary, EXCLUDED.cursor_seq, EXCLUDED.version, EXCLUDED.partition_key);

-- name: current_summary
SELECT summary, cursor_seq, cursor_ts, version FROM session_summaries WHERE session_id = %(session_id)s;

-- name: last_messages
-- A session's last messages along its timeline: a fork's own after those it shares with its parent.
SELECT session_id, seq, user_id, role, content, ts, content_hash, source_file, source_line,
       agent_id, tool_name, tool_args, tool_call_id, metadata
FROM (SELECT * FROM (SELECT * FROM messages WHERE session_id = %(session_id)s
                     UNION ALL
                     SELECT m.* FROM session_forks f
                     JOIN messages m ON m.session_id = f.parent_session_id AND m.seq <= f.fork_seq
                     WHERE f.session_id = %(session_id)s) AS timeline
      ORDER BY seq DESC LIMIT %(limit)s) AS recent
ORDER BY seq;

-- name: drop_orphan_current_summary
-- After its versions were discarded, a session's current row must not outlive them.
DELETE FROM session_summaries s
WHERE s.session_id = %(session_id)s AND s.version IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM session_summary_versions v WHERE v.session_id = s.session_id);

-- name: sessions_messages_in_windows_through
-- Each session's messages sent in its own [start, end) up to its own seq (every one: -1 is
-- none), by session and seq.
SELECT m.session_id, m.seq, m.user_id, m.role, m.content, m.ts, m.content_hash, m.source_file, m.source_line,
       m.agent_id, m.tool_name, m.tool_args, m.tool_call_id, m.metadata
FROM messages m
JOIN unnest(%(session_ids)s::text[], %(starts)s::timestamptz[], %(ends)s::timestamptz[], %(through_seqs)s::bigint[])
  AS w(session_id, start_ts, end_ts, through_seq) USING (session_id)
WHERE m.ts >= w.start_ts AND m.ts < w.end_ts AND m.seq <= w.through_seq
ORDER BY m.session_id, m.seq;

-- name: lock_sessions_for_fold
-- Held for a whole fold (several transactions); same keys as lock_sessions, which it
-- re-enters; taken in session order, so overlapping sets never deadlock.
SELECT pg_advisory_lock(hashtext('memory_pipelines.session'), hashtext(session_id))
FROM (SELECT DISTINCT session_id FROM unnest(%(session_ids)s::text[]) AS s(session_id) ORDER BY session_id) ordered;

-- name: unlock_sessions_for_fold
SELECT pg_advisory_unlock(hashtext('memory_pipelines.session'), hashtext(session_id))
FROM unnest(%(session_ids)s::text[]) AS s(session_id);

-- name: model_usage_by_purpose
-- Calls that went to a model (the rules back end is not one), per task: calls, input and output
-- tokens, calls whose first answer broke the schema and was asked again, calls that failed.
SELECT purpose, count(*), sum(input_tokens)::bigint, sum(output_tokens)::bigint,
       count(*) FILTER (WHERE schema_retried), count(*) FILTER (WHERE status <> 'ok')
FROM llm_calls WHERE backend <> 'rules' GROUP BY 1 ORDER BY 1;

-- name: summarized_session_days
-- The (session, day) pairs a summary version was written for: the unit model calls are counted against.
SELECT count(*) FROM (SELECT DISTINCT session_id, partition_key FROM session_summary_versions WHERE kind = 'chunk') AS days;

-- name: distilled_chunks
-- Chunk versions with the memory items their distillation calls wrote, by session and
-- version: of the sessions given built for days up to `through`, or, with no sessions given,
-- of every session but forks built for `day` (what a fork learns comes home with a merge).
SELECT v.session_id, v.user_id, v.version, v.partition_key, v.first_seq, v.last_seq, v.fingerprint, v.model,
       v.prompt_version, v.call_id, v.memory_items
FROM session_summary_versions v
WHERE v.kind = 'chunk' AND v.memory_items IS NOT NULL
  AND (%(session_ids)s::text[] IS NULL OR v.session_id = ANY(%(session_ids)s))
  AND (%(through)s::text IS NULL OR v.partition_key <= %(through)s)
  AND (%(day)s::text IS NULL OR v.partition_key = %(day)s) AND memory_shard(v.user_id, %(shards)s) = %(shard)s
  AND (%(session_ids)s::text[] IS NOT NULL
       OR NOT EXISTS (SELECT 1 FROM session_forks f WHERE f.session_id = v.session_id))
ORDER BY v.session_id, v.version;

-- name: chunks_kept_messages
-- The messages of the chunks' seq spans that their distillation calls read: system messages
-- and what noise judging dropped left out; by session and seq (a session's chunks of one day
-- never overlap; versions of several days may, and a message is read once).
SELECT DISTINCT ON (m.session_id, m.seq) m.session_id, m.seq, m.user_id, m.role, m.content, m.ts, m.content_hash, m.source_file, m.source_line,
       m.agent_id, m.tool_name, m.tool_args, m.tool_call_id, m.metadata
FROM unnest(%(session_ids)s::text[], %(firsts)s::bigint[], %(lasts)s::bigint[]) AS c(session_id, first_seq, last_seq)
JOIN messages m ON m.session_id = c.session_id AND m.seq BETWEEN c.first_seq AND c.last_seq
WHERE m.role <> 'system'
  AND NOT EXISTS (SELECT 1 FROM conversation_segments g
                  WHERE g.session_id = m.session_id AND g.dropped AND m.seq BETWEEN g.start_seq AND g.end_seq)
ORDER BY m.session_id, m.seq;

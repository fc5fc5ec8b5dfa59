-- name: bench_database_exists
SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = %(name)s);

-- name: bench_create_database
CREATE DATABASE {database};

-- name: bench_drop_database
DROP DATABASE IF EXISTS {database} WITH (FORCE);

-- name: bench_meta_create
-- What the benchmark database was built from: reused only when every parameter matches.
CREATE TABLE IF NOT EXISTS bench_search_meta (
    id            boolean     PRIMARY KEY DEFAULT true CHECK (id),
    params        jsonb       NOT NULL,
    complete      boolean     NOT NULL DEFAULT false,
    build_seconds real,
    built_at      timestamptz NOT NULL DEFAULT now()
);

-- name: bench_meta_read
SELECT params, complete, build_seconds FROM bench_search_meta;

-- name: bench_meta_start
INSERT INTO bench_search_meta (params) VALUES (%(params)s)
ON CONFLICT (id) DO UPDATE SET params = EXCLUDED.params, complete = false, build_seconds = NULL, built_at = now();

-- name: bench_meta_complete
UPDATE bench_search_meta SET complete = true, build_seconds = %(seconds)s;

-- name: bench_secondary_indexes
-- Indexes that back no constraint: dropped before a bulk load and built again after it.
SELECT i.indexname, i.indexdef FROM pg_indexes i
WHERE i.schemaname = current_schema() AND i.tablename = %(table)s
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conname = i.indexname)
ORDER BY i.indexname;

-- name: bench_copy_chunks
COPY memory_chunks (user_id, session_id, start_seq, end_seq, started_at, ended_at, content, content_hash, breadcrumbs,
                    message_count, partition_key, run_id, model, prompt_version, embedding, embedding_model)
FROM STDIN WITH (FORMAT BINARY);

-- name: bench_copy_facts
COPY memory_facts (user_id, category, key, canonical_key, value, source, confidence, last_verified_at, session_id,
                   seq_start, seq_end, partition_key, run_id, model, prompt_version, embedding, embedding_model)
FROM STDIN WITH (FORMAT BINARY);

-- name: bench_vacuum_analyze
VACUUM (ANALYZE) {table};

-- name: bench_id_range
SELECT coalesce(min(id), 0), coalesce(max(id), 0) FROM {table};

-- name: bench_chunks_by_id
SELECT id, user_id, content FROM memory_chunks WHERE id = ANY(%(ids)s) ORDER BY id;

-- name: bench_facts_by_id
SELECT id, user_id, key, value FROM memory_facts WHERE id = ANY(%(ids)s) AND merged_into IS NULL ORDER BY id;

-- name: bench_user_chunk_vectors
-- Every vector the chunk vector path could return for one user: the exact search's input.
SELECT id, embedding FROM memory_chunks WHERE user_id = %(user_id)s AND embedding_model = %(model)s;

-- name: bench_user_fact_vectors
SELECT id, embedding FROM memory_facts
WHERE user_id = %(user_id)s AND embedding_model = %(model)s AND merged_into IS NULL;

-- name: bench_relevant_counts
-- What holds every needle (case-insensitive substring, as the benchmark judges a hit): the
-- user's chunks, and everything unified search can return to that user — chunks, current
-- facts, sketches, and knowledge entries of theirs (entity or session scope) or global ones
-- that have not expired.
SELECT
    (SELECT count(*) FROM memory_chunks WHERE user_id = %(user_id)s
       AND NOT EXISTS (SELECT 1 FROM unnest(%(needles)s::text[]) n WHERE strpos(lower(content), lower(n)) = 0))
      AS chunks,
    (SELECT count(*) FROM memory_facts WHERE user_id = %(user_id)s AND merged_into IS NULL
       AND NOT EXISTS (SELECT 1 FROM unnest(%(needles)s::text[]) n
                       WHERE strpos(lower(key || ': ' || value), lower(n)) = 0))
    + (SELECT count(*) FROM sketches WHERE user_id = %(user_id)s
       AND NOT EXISTS (SELECT 1 FROM unnest(%(needles)s::text[]) n
                       WHERE strpos(lower(key || ': ' || value), lower(n)) = 0))
    + (SELECT count(*) FROM knowledge_entries
       WHERE (scope = 'global' OR (user_id = %(user_id)s AND scope IN ('entity', 'session')))
       AND (valid_until IS NULL OR valid_until > now())
       AND NOT EXISTS (SELECT 1 FROM unnest(%(needles)s::text[]) n
                       WHERE strpos(lower(title || ': ' || content), lower(n)) = 0))
      AS other_stores;

-- name: bench_chunks_holding_facts
-- Facts as an extra key of chunks: the chunks that hold each fact's source messages, in the
-- order the facts are given.
SELECT c.id, c.user_id, c.session_id, c.start_seq, c.end_seq, c.ended_at, c.content, f.ord
FROM unnest(%(fact_ids)s::bigint[]) WITH ORDINALITY AS f (fact_id, ord)
JOIN memory_facts m ON m.id = f.fact_id
JOIN memory_chunks c ON c.user_id = m.user_id AND c.session_id = m.session_id
                    AND c.start_seq <= m.seq_end AND c.end_seq >= m.seq_start
ORDER BY f.ord, c.start_seq, c.id;

-- name: bench_chunks_keyed_by_summaries
-- Session summaries as an extra key of chunks: every chunk of a session of the user whose
-- summary entries (decisions, past and current discussion; its keys already reach chunks as
-- breadcrumbs) contain a query term, with those entries for scoring.
SELECT c.id, c.user_id, c.session_id, c.start_seq, c.end_seq, c.ended_at, c.content, e.entries
FROM session_summaries s
CROSS JOIN LATERAL (
    SELECT concat_ws(' ', s.summary ->> 'current_discussion',
                     (SELECT string_agg(v, ' ') FROM jsonb_array_elements_text(
                         coalesce(s.summary -> 'key_decisions', '[]') || coalesce(s.summary -> 'past_discussions', '[]'))
                      AS v)) AS entries) e
JOIN memory_chunks c ON c.session_id = s.session_id AND c.user_id = s.user_id
WHERE s.user_id = %(user_id)s
  AND EXISTS (SELECT 1 FROM unnest(%(terms)s::text[]) t WHERE strpos(lower(e.entries), t) > 0)
ORDER BY c.ended_at DESC, c.id;

-- name: bench_turn_lengths
-- What each turn of these sessions reads as (its role and body), for reading a chunk turn by turn.
SELECT session_id, seq, initcap(role), body FROM memory_turns WHERE session_id = ANY(%(session_ids)s);

-- name: bench_meta_turn_columns
ALTER TABLE bench_search_meta ADD COLUMN IF NOT EXISTS turn_load_seconds real,
                              ADD COLUMN IF NOT EXISTS turn_index_seconds real;

-- name: bench_meta_turn_build
UPDATE bench_search_meta SET turn_load_seconds = %(load)s, turn_index_seconds = %(index)s;

-- name: bench_meta_turn_build_read
SELECT turn_load_seconds, turn_index_seconds FROM bench_search_meta;

-- name: bench_create_turn_load
CREATE TEMP TABLE IF NOT EXISTS bench_turn_load (
    session_id text, seq bigint, user_id text, pos integer, role text, ts timestamptz, body text,
    embedding halfvec, embedding_model text
) ON COMMIT DELETE ROWS;

-- name: bench_copy_turn_load
COPY bench_turn_load (session_id, seq, user_id, pos, role, ts, body, embedding, embedding_model)
FROM STDIN WITH (FORMAT BINARY);

-- name: bench_insert_turns
-- The staged turns, indexed by the functions the pipeline's own rows are (migration 0013).
INSERT INTO memory_turns (session_id, seq, user_id, pos, role, ts, language, body, keys, tsv, body_length,
                          content_hash, window_hash, embedding, embedding_model, partition_key, run_id)
SELECT session_id, seq, user_id, pos, role, ts, 'english', body, '{}', memory_turn_tsv('english', body, '{}', user_id),
       memory_turn_length('english', body), md5(body), md5(body), embedding, embedding_model,
       to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD'), 'bench'
FROM bench_turn_load;

-- name: bench_turn_stats
INSERT INTO memory_turn_stats (user_id, language, turns, total_length)
SELECT user_id, language, count(*), sum(body_length) FROM memory_turns GROUP BY user_id, language;

-- name: bench_turn_sizes
SELECT pg_table_size('memory_turns'), pg_indexes_size('memory_turns');

-- name: bench_turns_by_id
SELECT id, user_id, body FROM memory_turns WHERE id = ANY(%(ids)s);

-- name: bench_busiest_user
-- `bench serve`'s default user: the one with the most served facts.
SELECT user_id FROM memory_facts WHERE merged_into IS NULL GROUP BY user_id ORDER BY count(*) DESC, user_id LIMIT 1;

-- name: bench_user_size
SELECT (SELECT count(*) FROM memory_facts WHERE user_id = %(user_id)s AND merged_into IS NULL) AS facts,
       (SELECT count(*) FROM memory_turns WHERE user_id = %(user_id)s) AS turns;

-- name: bench_fact_keys
-- What `bench serve` asks about besides the sample's questions: the user's fact keys.
SELECT DISTINCT key FROM memory_facts WHERE user_id = %(user_id)s AND merged_into IS NULL ORDER BY key LIMIT 200;

-- name: bench_server_activity
-- What every other client connection is doing now, for `bench distill`'s sampler: running
-- (CPU), waiting (the wait's type and event; an advisory lock named by the project's lock it
-- is: transcripts, session, user, dagster_schema), or idle inside a transaction;
-- idle ones as idle, so that their count is the connections open.
SELECT CASE WHEN a.state = 'active' AND a.wait_event_type IS NULL THEN 'CPU'
            WHEN a.state = 'active' THEN a.wait_event_type
            WHEN a.state IN ('idle in transaction', 'idle in transaction (aborted)') THEN 'idle in transaction'
            ELSE 'idle' END AS kind,
       CASE WHEN a.state = 'active' AND a.wait_event_type IS NULL THEN 'running'
            WHEN a.state = 'active' AND a.wait_event = 'advisory' THEN 'advisory ' || coalesce(waited.lock, 'other')
            ELSE coalesce(a.wait_event, '') END AS event,
       count(*) AS connections
FROM pg_stat_activity a
LEFT JOIN LATERAL (
    -- pg_locks splits a one-key lock into high and low 32 bits, a two-key one into its keys
    SELECT min(name) AS lock
    FROM pg_locks l
    JOIN (VALUES ('transcripts', 1), ('session', 2), ('user', 2), ('dagster_schema', 1)) AS project(name, keys)
      ON l.objsubid = project.keys
     AND CASE project.keys WHEN 1 THEN l.objid::bigint ELSE l.classid::bigint END
         = hashtext('memory_pipelines.' || project.name)::bigint & 4294967295
    WHERE l.pid = a.pid AND l.locktype = 'advisory' AND NOT l.granted
) waited ON a.wait_event = 'advisory'
WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()
GROUP BY 1, 2;

-- name: bench_server_counters
-- The server's cumulative counters `bench distill` reads before and after the runs (WAL and
-- checkpoints server-wide, transactions of this database).
SELECT (SELECT wal_bytes FROM pg_stat_wal)::bigint AS wal_bytes,
       (SELECT wal_fpi FROM pg_stat_wal) AS wal_full_pages,
       (SELECT wal_buffers_full FROM pg_stat_wal) AS wal_buffers_full,
       (SELECT num_requested FROM pg_stat_checkpointer) AS checkpoints_requested,
       xact_commit AS commits, xact_rollback AS rollbacks, deadlocks
FROM pg_stat_database WHERE datname = current_database();

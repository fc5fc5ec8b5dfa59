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

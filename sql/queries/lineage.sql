-- name: lineage_fact
SELECT id, user_id, category, key, value, source, confidence, source_context, merged_into, session_id, seq_start,
       seq_end, partition_key, run_id, model, prompt_version, last_verified_at, call_id
FROM memory_facts WHERE id = %(id)s;

-- name: lineage_fact_merged
SELECT id, key, value, merged_into FROM memory_facts WHERE merged_into = %(id)s OR id = %(merged_into)s ORDER BY id;

-- name: lineage_chunk
SELECT id, user_id, session_id, start_seq AS seq_start, end_seq AS seq_end, partition_key, run_id, model,
       prompt_version, breadcrumbs, summary_version, embedding_model
FROM memory_chunks WHERE id = %(id)s;

-- name: lineage_entry
SELECT id, user_id, kind, title, content, version, scope, session_id, seq_start, seq_end, partition_key, run_id,
       model, prompt_version, entry_key, call_id
FROM knowledge_entries WHERE id = %(id)s;

-- name: lineage_turn
SELECT id, user_id, session_id, seq AS seq_start, seq AS seq_end, pos, role, ts, language, keys, partition_key,
       run_id, embedding_model
FROM memory_turns WHERE id = %(id)s;

-- name: lineage_entry_versions
SELECT observed_at, session_id, seq_start, seq_end, left(content, 120) AS content, run_id
FROM knowledge_entry_versions WHERE entry_key = %(entry_key)s ORDER BY observed_at;

-- name: lineage_summary
SELECT session_id, version, user_id, kind, partition_key, step, step_count, first_seq AS seq_start,
       last_seq AS seq_end, cursor_seq, run_id, model, prompt_version, backend, trimmed, call_id
FROM session_summary_versions WHERE session_id = %(session_id)s ORDER BY version;

-- name: lineage_messages
SELECT seq, role, ts, left(content, %(chars)s) AS excerpt, source_file, source_line
FROM messages WHERE session_id = %(session_id)s AND seq BETWEEN %(first)s AND %(last)s ORDER BY seq;

-- name: lineage_calls
-- The call that wrote a row, by its id; for a row written before calls had ids (call_id NULL),
-- the run's calls of its session (of the purpose that wrote such rows then, when given).
SELECT id, call_id, asset, purpose, backend, model, prompt_version, input_tokens, output_tokens, tokens_estimated,
       latency_ms, status, created_at
FROM llm_calls
WHERE CASE WHEN %(call_id)s::text IS NOT NULL THEN call_id = %(call_id)s
           ELSE run_id = %(run_id)s AND session_id = %(session_id)s
                AND (%(purpose)s::text IS NULL OR purpose = %(purpose)s) END
ORDER BY id;

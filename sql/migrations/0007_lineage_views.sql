-- Views for analysts: each served row with where it came from and the model calls that
-- produced it (same run, session and purpose).

CREATE OR REPLACE VIEW fact_lineage AS
SELECT f.id AS fact_id, f.user_id, f.category, f.key, f.value, f.confidence, f.merged_into,
       f.session_id, f.seq_start, f.seq_end, f.partition_key, f.run_id, f.model, f.prompt_version,
       c.id AS call_id, c.backend, c.input_tokens, c.output_tokens, c.latency_ms, c.status AS call_status
FROM memory_facts f
LEFT JOIN llm_calls c ON c.run_id = f.run_id AND c.session_id = f.session_id AND c.purpose = 'extract_facts';

CREATE OR REPLACE VIEW chunk_lineage AS
SELECT k.id AS chunk_id, k.user_id, k.session_id, k.start_seq, k.end_seq, k.started_at, k.ended_at,
       k.content_hash, k.summary_version, k.partition_key, k.run_id, k.model, k.prompt_version,
       k.embedding_model, (SELECT count(*) FROM messages m WHERE m.session_id = k.session_id
                           AND m.seq BETWEEN k.start_seq AND k.end_seq) AS source_messages
FROM memory_chunks k;

CREATE OR REPLACE VIEW entry_lineage AS
SELECT e.id AS entry_id, e.entry_key, e.user_id, e.kind, e.title, e.version, e.scope, e.session_id, e.seq_start,
       e.seq_end, e.partition_key, e.run_id, e.model, e.prompt_version,
       c.id AS call_id, c.backend, c.input_tokens, c.output_tokens, c.status AS call_status
FROM knowledge_entries e
LEFT JOIN llm_calls c ON c.run_id = e.run_id AND c.session_id = e.session_id AND c.purpose = 'synthesize_knowledge'
                      AND c.partition_key = e.partition_key;

CREATE OR REPLACE VIEW summary_lineage AS
SELECT v.session_id, v.version, v.user_id, v.partition_key, v.step, v.kind, v.first_seq, v.last_seq, v.cursor_seq,
       v.run_id, v.backend, v.model, v.prompt_version,
       (SELECT coalesce(sum(c.input_tokens), 0) FROM llm_calls c WHERE c.run_id = v.run_id
          AND c.session_id = v.session_id AND c.partition_key = v.partition_key) AS day_input_tokens,
       (SELECT coalesce(sum(c.output_tokens), 0) FROM llm_calls c WHERE c.run_id = v.run_id
          AND c.session_id = v.session_id AND c.partition_key = v.partition_key) AS day_output_tokens
FROM session_summary_versions v;

-- Model calls and tokens per user and day.
CREATE OR REPLACE VIEW model_usage_daily AS
SELECT s.user_id, c.partition_key AS day, c.backend, c.model, count(*) AS calls,
       sum(c.input_tokens) AS input_tokens, sum(c.output_tokens) AS output_tokens,
       count(*) FILTER (WHERE c.status <> 'ok') AS failed_calls
FROM llm_calls c LEFT JOIN sessions s USING (session_id)
GROUP BY 1, 2, 3, 4;

-- One distillation call per summarized chunk (issue 16): the call that writes a chunk's summary
-- returns its facts, knowledge entries and relations too. They are kept with the summary
-- version, as the model gave them, and the facts and knowledge stages read them from there.
-- Every call has an id of its own, and every row a call wrote names it (lineage).

ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS call_id text;
CREATE UNIQUE INDEX IF NOT EXISTS llm_calls_call_id_idx ON llm_calls (call_id);

ALTER TABLE session_summary_versions
    ADD COLUMN IF NOT EXISTS memory_items jsonb,  -- {"facts": [...], "entries": [...], "relations": [...]}
    ADD COLUMN IF NOT EXISTS call_id      text;

ALTER TABLE memory_facts ADD COLUMN IF NOT EXISTS call_id text;
ALTER TABLE memory_fact_rejections ADD COLUMN IF NOT EXISTS call_id text;
ALTER TABLE knowledge_entries ADD COLUMN IF NOT EXISTS call_id text;
ALTER TABLE knowledge_entry_versions ADD COLUMN IF NOT EXISTS call_id text;
ALTER TABLE entity_graph ADD COLUMN IF NOT EXISTS call_id text;

-- The lineage views find a row's call by its id; rows written before it (no call_id) by the
-- run, session and purpose that wrote them, as before.
CREATE OR REPLACE VIEW fact_lineage AS
SELECT f.id AS fact_id, f.user_id, f.category, f.key, f.value, f.confidence, f.merged_into,
       f.session_id, f.seq_start, f.seq_end, f.partition_key, f.run_id, f.model, f.prompt_version,
       c.id AS call_id, c.backend, c.input_tokens, c.output_tokens, c.latency_ms, c.status AS call_status
FROM memory_facts f
LEFT JOIN llm_calls c ON c.call_id = f.call_id
    OR (f.call_id IS NULL AND c.run_id = f.run_id AND c.session_id = f.session_id AND c.purpose = 'extract_facts');

CREATE OR REPLACE VIEW entry_lineage AS
SELECT e.id AS entry_id, e.entry_key, e.user_id, e.kind, e.title, e.version, e.scope, e.session_id, e.seq_start,
       e.seq_end, e.partition_key, e.run_id, e.model, e.prompt_version,
       c.id AS call_id, c.backend, c.input_tokens, c.output_tokens, c.status AS call_status
FROM knowledge_entries e
LEFT JOIN llm_calls c ON c.call_id = e.call_id
    OR (e.call_id IS NULL AND c.run_id = e.run_id AND c.session_id = e.session_id
        AND c.purpose = 'synthesize_knowledge' AND c.partition_key = e.partition_key);

-- The knowledge stage reads a day's chunk versions.
CREATE INDEX IF NOT EXISTS session_summary_versions_chunk_day_idx ON session_summary_versions (partition_key)
    WHERE kind = 'chunk';

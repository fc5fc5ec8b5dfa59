-- Decay-scored turns (memory_pipelines.turns.score_turns): how often a turn was served and
-- when last. Serving state, as on memory_facts and knowledge_entries: indexing a session
-- again leaves it (upsert_turn sets neither column).
ALTER TABLE memory_turns ADD COLUMN IF NOT EXISTS access_count integer NOT NULL DEFAULT 0;
ALTER TABLE memory_turns ADD COLUMN IF NOT EXISTS last_accessed_at timestamptz;

-- A turn's importance comes from the entries whose seq span covers it: found by session.
CREATE INDEX IF NOT EXISTS knowledge_entries_session_idx ON knowledge_entries (session_id);

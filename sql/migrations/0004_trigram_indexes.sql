-- requires-extension: pg_trgm
-- Trigram indexes for the ILIKE fallback of fact search; skipped (and retried on the next
-- migrate) when the server has no pg_trgm, as the navi design does.
CREATE INDEX IF NOT EXISTS memory_facts_category_trgm ON memory_facts USING gin (category gin_trgm_ops);
CREATE INDEX IF NOT EXISTS memory_facts_key_trgm ON memory_facts USING gin (key gin_trgm_ops);
CREATE INDEX IF NOT EXISTS memory_facts_value_trgm ON memory_facts USING gin (value gin_trgm_ops);

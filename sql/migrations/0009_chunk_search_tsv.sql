-- Chunks keep their full-text vector, so the text path of search reads it instead of
-- parsing every one of the user's chunks on every query: to_tsvector of a 2 kB chunk costs
-- about 0.25 ms, which made the text path about 90% of a hybrid search
-- (`memory-pipelines bench search`). A generated column (to_tsvector with a named
-- configuration is immutable); adding it rewrites the table once.
ALTER TABLE memory_chunks ADD COLUMN IF NOT EXISTS content_tsv tsvector
    GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED;

-- The full-text index moves to the stored column.
CREATE INDEX IF NOT EXISTS memory_chunks_tsv_idx ON memory_chunks USING gin (content_tsv);
DROP INDEX IF EXISTS memory_chunks_fts_idx;

-- Chunks' full text, rebuilt for search taking its text candidates from it alone (no
-- substring match over every chunk's content and breadcrumbs):
-- - the breadcrumbs (entities and the session summary's keys) are indexed with the content,
--   so a query naming a key finds the chunks it belongs to even when they do not say it;
-- - the words inside paths, URLs, hosts and dotted names become lexemes of their own: the
--   `simple` parser keeps `pd.read_csv`, `/srv/reports/` or `data.ecb.eu` whole, which a
--   query word (`read`, `reports`) never matches;
-- - positions are stripped: ranking counts the query's terms a chunk holds, and without
--   positions the vector is a third smaller (2.5 kB for a 2.4 kB chunk), so ranking a
--   user's chunks reads less.
-- Rebuilt by dropping and adding the column (SET EXPRESSION needs PostgreSQL 17); running it
-- again gives the same column.
DROP INDEX IF EXISTS memory_chunks_tsv_idx;
ALTER TABLE memory_chunks DROP COLUMN IF EXISTS content_tsv;
-- array_to_string is only STABLE (for arrays of any type); for text[] it cannot vary, and a
-- generated column needs an IMMUTABLE expression.
CREATE OR REPLACE FUNCTION memory_chunk_search_text(content text, breadcrumbs text[]) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT content || ' ' || array_to_string(breadcrumbs, ' ') $$;
ALTER TABLE memory_chunks ADD COLUMN content_tsv tsvector
    GENERATED ALWAYS AS (strip(to_tsvector('simple', translate(memory_chunk_search_text(content, breadcrumbs),
                                                               './@:', '    ')))) STORED;
CREATE INDEX IF NOT EXISTS memory_chunks_tsv_idx ON memory_chunks USING gin (content_tsv);
-- The planner picks between the GIN index and a scan of the user's rows by the lexeme
-- statistics, which the new column has none of until analyzed.
ANALYZE memory_chunks;

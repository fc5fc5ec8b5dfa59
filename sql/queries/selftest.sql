-- The database self-test of `memory-pipelines doctor` (memory_pipelines/db/selftest.py): every
-- vector and text operation the project runs on the server, once each, on a migrated
-- database. Run on a throwaway server: a probe that crashes its backend harms nothing else.

-- name: selftest_create_vectors
-- halfvec_typmod_in; kept inline as the embedded tables keep theirs (migration 0025)
CREATE TEMP TABLE selftest_vectors (id integer PRIMARY KEY, embedding halfvec(384));
ALTER TABLE selftest_vectors ALTER COLUMN embedding SET STORAGE PLAIN;

-- name: selftest_copy_vectors
-- halfvec_recv, as memory_embeddings loads its pages
COPY selftest_vectors (id, embedding) FROM STDIN WITH (FORMAT BINARY);

-- name: selftest_analyze_vectors
-- halfvec_cmp, as ANALYZE orders a column's values for its statistics (the embedding load's
-- and autovacuum's)
ANALYZE selftest_vectors;

-- name: selftest_nearest_vectors
-- cosine_distance(halfvec, halfvec) as search orders by it, vector_dims(halfvec) as the
-- embeddings check reads it, halfvec_send (a binary result) and halfvec_out (text)
SELECT id, embedding <=> %(vector)s::halfvec AS distance, vector_dims(embedding), embedding, embedding::text
FROM selftest_vectors
ORDER BY embedding <=> %(vector)s::halfvec, id
LIMIT 3;

-- name: selftest_vector_to_halfvec
-- the cast migration 0025 converts stored vectors with (vector_in, vector_to_halfvec)
SELECT vector_dims(%(text)s::vector::halfvec);

-- name: selftest_turn_lexemes
-- the turn index's lexemes in every text search configuration it uses (migrations 0013,
-- 0021), matched, ranked, and read back as BM25 reads its term frequencies
SELECT c.config,
       memory_turn_tsv(c.config, %(text)s, ARRAY['ledger api'], 'selftest') @@ to_tsquery(c.config::regconfig, 'port'),
       ts_rank(memory_turn_tsv(c.config, %(text)s, '{}', 'selftest'), to_tsquery(c.config::regconfig, 'port')),
       (SELECT count(*) FROM unnest(memory_turn_lexemes(c.config, %(text)s)))
FROM unnest(%(configs)s::text[]) AS c(config)
ORDER BY c.config;

-- name: selftest_chunk_lexemes
-- the chunks' and knowledge entries' full text (migrations 0006, 0011)
SELECT strip(to_tsvector('simple', memory_chunk_search_text(%(text)s, ARRAY['ledger-api']))) @@ to_tsquery('simple', 'port:*'),
       ts_rank_cd(to_tsvector('simple', %(text)s), to_tsquery('simple', 'port'));

-- name: selftest_create_words
-- the trigram indexes of the ILIKE fallback (migration 0004)
CREATE TEMP TABLE selftest_words (word text);
INSERT INTO selftest_words SELECT 'ledger-api port ' || g FROM generate_series(1, 200) AS g;
CREATE INDEX selftest_words_trgm ON selftest_words USING gin (word gin_trgm_ops);
ANALYZE selftest_words;
SET enable_seqscan = off;  -- the index, not a scan, answers the probe

-- name: selftest_trigram_search
SELECT count(*) FROM selftest_words WHERE word ILIKE ANY(%(patterns)s);

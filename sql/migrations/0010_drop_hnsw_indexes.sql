-- The HNSW indexes memory_embeddings used to build (one per table and model, on
-- `embedding::vector(dim)`) served no query: every search is scoped to one user, and for
-- that the planner's exact top-N over the user's rows is both exact and faster (HNSW under
-- a filter this selective returned 3-5 of 10 rows, or about 0.8 recall at p95 50-80 ms with
-- iterative scans; see CONVENTIONS "Per-user search at scale"). They cost a 250 s build and
-- over 2 GB of maintenance_work_mem at 1M rows, and slow every insert. Found by access
-- method, as their names carry a hash of the model.
DO $$
DECLARE
    doomed regclass;
BEGIN
    FOR doomed IN
        SELECT i.indexrelid::regclass
        FROM pg_index i
        JOIN pg_class c ON c.oid = i.indexrelid
        JOIN pg_am am ON am.oid = c.relam
        WHERE am.amname = 'hnsw'
          AND i.indrelid IN (SELECT to_regclass(t) FROM unnest(ARRAY['memory_facts', 'memory_chunks',
                                                                     'knowledge_entries']) AS t)
    LOOP
        EXECUTE format('DROP INDEX IF EXISTS %s', doomed);
    END LOOP;
END
$$;

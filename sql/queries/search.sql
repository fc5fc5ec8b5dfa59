-- The rows to embed, their text, and whether they hold a vector of another model (re-embedded).

-- name: facts_needing_embedding
SELECT id, '[' || category || '] ' || replace(key, '_', ' ') || ': ' || value, embedding IS NOT NULL
FROM memory_facts
WHERE merged_into IS NULL AND (embedding IS NULL OR embedding_model IS DISTINCT FROM %(model)s) AND id > %(after)s
  AND memory_shard(user_id, %(shards)s) = %(shard)s
ORDER BY id LIMIT %(limit)s;

-- name: chunks_needing_embedding
SELECT id, left(content, 2000) || E'\n' || array_to_string(breadcrumbs, ', '), embedding IS NOT NULL
FROM memory_chunks
WHERE (embedding IS NULL OR embedding_model IS DISTINCT FROM %(model)s) AND id > %(after)s AND memory_shard(user_id, %(shards)s) = %(shard)s
ORDER BY id LIMIT %(limit)s;

-- name: entries_needing_embedding
SELECT id, '[' || kind || '] ' || title || E'\n' || content || E'\n' || array_to_string(tags, ', '), embedding IS NOT NULL
FROM knowledge_entries
WHERE (embedding IS NULL OR embedding_model IS DISTINCT FROM %(model)s) AND id > %(after)s AND memory_shard(user_id, %(shards)s) = %(shard)s
ORDER BY id LIMIT %(limit)s;

-- name: turns_needing_embedding
-- A turn is embedded read with its neighbours (memory_pipelines.core.turn_index.window_text).
SELECT t.id, concat_ws(E'\n', right(p.body, 600), left(t.body, 1600), left(n.body, 600)), t.embedding IS NOT NULL
FROM memory_turns t
-- (the user in the join: memory_turns_user_idx finds a neighbour by its position)
LEFT JOIN memory_turns p ON p.user_id = t.user_id AND p.session_id = t.session_id AND p.pos = t.pos - 1
LEFT JOIN memory_turns n ON n.user_id = t.user_id AND n.session_id = t.session_id AND n.pos = t.pos + 1
WHERE (t.embedding IS NULL OR t.embedding_model IS DISTINCT FROM %(model)s) AND t.id > %(after)s
  AND memory_shard(t.user_id, %(shards)s) = %(shard)s
ORDER BY t.id LIMIT %(limit)s;

-- name: create_embedding_load
CREATE TEMP TABLE IF NOT EXISTS embedding_load (id bigint PRIMARY KEY, embedding halfvec) ON COMMIT DROP;

-- name: copy_embedding_load
COPY embedding_load (id, embedding) FROM STDIN WITH (FORMAT BINARY);

-- name: analyze_embedding_load
-- A fresh temp table has no statistics: without them the planner guesses thousands of rows
-- and joins a page by a sequential scan of the whole embedded table (0.15 s a page at 100k
-- turns, most of the stage); counted, it looks each row up by id.
ANALYZE embedding_load;

-- name: apply_embedding_load
UPDATE {table} AS t SET embedding = l.embedding, embedding_model = %(model)s
FROM embedding_load AS l WHERE t.id = l.id;

-- name: drop_index
DROP INDEX IF EXISTS {index};

-- name: fact_vector_search
SELECT id, user_id, category, key, value, confidence, last_verified_at, session_id, seq_start, seq_end,
       embedding <=> %(vector)s::halfvec AS distance
FROM memory_facts
WHERE merged_into IS NULL AND embedding_model = %(model)s AND (%(all_users)s OR user_id = %(user_id)s)
ORDER BY embedding <=> %(vector)s::halfvec, id
LIMIT %(limit)s;

-- name: fact_text_search
-- The ILIKE fallback: a row matches when any term appears in its category, key or value.
SELECT id, user_id, category, key, value, confidence, last_verified_at, session_id, seq_start, seq_end,
       NULL::float8 AS distance
FROM memory_facts
WHERE merged_into IS NULL AND (%(all_users)s OR user_id = %(user_id)s)
  AND (category ILIKE ANY(%(patterns)s) OR key ILIKE ANY(%(patterns)s) OR value ILIKE ANY(%(patterns)s))
ORDER BY last_verified_at DESC, id
LIMIT %(scan_limit)s;

-- name: chunk_search
-- Every chunk search mode in one statement: the exact vector top-N over the user's rows and
-- full-text candidates, each ranked; the caller fuses the two rankings. A limit of 0 leaves
-- a side out. Candidates match any term as a prefix (`match`: the `simple` configuration
-- does not stem, `report` should find `reports`) and are ranked on whole terms (`rank`).
-- Both are bound values, so the planner sees how common the terms are and picks the GIN
-- index or the user's rows (a few hundred per user: it took the latter at 200k and 1M).
-- A named session holds its subagents' sessions (`<session>:agent-<id>`, docs/formats.md).
WITH by_vector AS (
    SELECT id, embedding <=> %(vector)s::halfvec AS distance,
           row_number() OVER (ORDER BY embedding <=> %(vector)s::halfvec, id) AS vector_rank
    FROM memory_chunks
    WHERE embedding_model = %(model)s AND (%(all_users)s OR user_id = %(user_id)s)
      AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s
           OR starts_with(session_id, %(session_id)s || ':agent-'))
      AND (%(include_forks)s OR %(session_id)s::text IS NOT NULL
           OR NOT EXISTS (SELECT 1 FROM session_forks f WHERE f.session_id = memory_chunks.session_id))
    ORDER BY embedding <=> %(vector)s::halfvec, id
    LIMIT %(vector_limit)s
),
by_text AS (
    SELECT id, row_number() OVER (ORDER BY ts_rank(content_tsv, to_tsquery('simple', %(rank)s)) DESC,
                                           ended_at DESC, id) AS text_rank
    FROM memory_chunks
    WHERE content_tsv @@ to_tsquery('simple', %(match)s) AND (%(all_users)s OR user_id = %(user_id)s)
      AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s
           OR starts_with(session_id, %(session_id)s || ':agent-'))
      AND (%(include_forks)s OR %(session_id)s::text IS NOT NULL
           OR NOT EXISTS (SELECT 1 FROM session_forks f WHERE f.session_id = memory_chunks.session_id))
    ORDER BY ts_rank(content_tsv, to_tsquery('simple', %(rank)s)) DESC, ended_at DESC, id
    LIMIT %(text_limit)s
)
SELECT c.id, c.user_id, c.session_id, c.start_seq, c.end_seq, c.started_at, c.ended_at, c.content, c.breadcrumbs,
       v.distance, v.vector_rank, t.text_rank
FROM by_vector v FULL JOIN by_text t USING (id)
JOIN memory_chunks c ON c.id = coalesce(v.id, t.id)
ORDER BY v.vector_rank NULLS LAST, t.text_rank;

-- name: recent_chunks
SELECT id, user_id, session_id, start_seq, end_seq, started_at, ended_at, content, breadcrumbs,
       NULL::float8 AS distance
FROM memory_chunks
WHERE (%(all_users)s OR user_id = %(user_id)s)
  AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s
       OR starts_with(session_id, %(session_id)s || ':agent-'))
  AND (%(include_forks)s OR %(session_id)s::text IS NOT NULL
       OR NOT EXISTS (SELECT 1 FROM session_forks f WHERE f.session_id = memory_chunks.session_id))
ORDER BY ended_at DESC, id DESC
LIMIT %(limit)s;

-- name: archive_text_search
-- Keyword search over every archived message (what chunks do not hold yet too).
SELECT session_id, seq, user_id, role, content, ts
FROM messages
WHERE (%(all_users)s OR user_id = %(user_id)s) AND role IN ('user', 'assistant', 'tool')
  AND to_tsvector('simple', content) @@ to_tsquery('simple', %(tsquery)s)
ORDER BY ts_rank_cd(to_tsvector('simple', content), to_tsquery('simple', %(tsquery)s)) DESC, ts DESC,
         session_id, seq
LIMIT %(limit)s;

-- name: message_context
-- A hit widened: the 2 messages before it and the 1 after it.
SELECT session_id, seq, user_id, role, content, ts
FROM messages
WHERE session_id = %(session_id)s AND user_id = %(user_id)s AND seq BETWEEN %(first)s AND %(last)s
ORDER BY seq;

-- name: newer_facts_for_users
-- The facts that could supersede an excerpt: the users', seen after the oldest excerpt.
SELECT user_id, category, key, value, last_verified_at FROM memory_facts
WHERE merged_into IS NULL AND user_id = ANY(%(user_ids)s) AND last_verified_at > %(since)s
ORDER BY user_id, category, key;

-- name: fact_items_of_sessions
-- The facts these sessions' turns stated, as their distillation calls gave them: each with
-- the turn it cites (an excerpt holding that turn said it).
SELECT DISTINCT v.session_id, (f ->> 'seq')::bigint AS seq, f ->> 'key' AS key, f ->> 'value' AS value
FROM session_summary_versions v
CROSS JOIN LATERAL jsonb_array_elements(coalesce(v.memory_items -> 'facts', '[]'::jsonb)) AS f
WHERE v.session_id = ANY(%(session_ids)s) AND f ? 'seq' AND f ? 'key' AND f ? 'value'
ORDER BY 1, 2, 3;

-- name: closed_statements_of_sessions
-- The graph statements these sessions' turns made that a newer one about the same subject
-- and relation closed, with the newer object.
SELECT g.session_id, g.seq_start, g.seq_end, g.subject, g.relation, n.object AS newer_object, g.valid_until
FROM entity_graph g JOIN entity_graph n ON n.id = g.closed_by
WHERE g.session_id = ANY(%(session_ids)s)
ORDER BY g.id;

-- name: summary_cursors
SELECT session_id, cursor_ts FROM session_summaries WHERE session_id = ANY(%(session_ids)s);

-- name: sketch_search
SELECT id, user_id, scope, session_id, section, key, value, updated_at
FROM sketches
WHERE (%(all_users)s OR user_id = %(user_id)s)
  AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s OR scope = 'user')
  AND (cardinality(%(patterns)s::text[]) = 0 OR key ILIKE ANY(%(patterns)s) OR value ILIKE ANY(%(patterns)s)
       OR section ILIKE ANY(%(patterns)s))
ORDER BY (session_id = %(current_session_id)s) DESC NULLS LAST, updated_at DESC, id
LIMIT %(limit)s;

-- name: upsert_sketch
-- Updated in place; the newest write in conversation time wins.
INSERT INTO sketches AS s (user_id, scope, session_id, scope_key, section, key, value, updated_at, source,
                           source_seq, partition_key, run_id)
VALUES (%(user_id)s, %(scope)s, %(session_id)s, %(scope_key)s, %(section)s, %(key)s, %(value)s, %(updated_at)s,
        %(source)s, %(source_seq)s, %(partition_key)s, %(run_id)s)
ON CONFLICT (user_id, scope, scope_key, section, key) DO UPDATE
SET value = EXCLUDED.value, session_id = EXCLUDED.session_id, updated_at = EXCLUDED.updated_at,
    source = EXCLUDED.source, source_seq = EXCLUDED.source_seq, partition_key = EXCLUDED.partition_key,
    run_id = EXCLUDED.run_id
WHERE EXCLUDED.updated_at > s.updated_at
   OR (EXCLUDED.updated_at = s.updated_at AND EXCLUDED.value > s.value);

-- name: scratchpad_writes
-- (forks left out: what the user's memory learns from them comes with a merge)
SELECT session_id, seq, user_id, ts, tool_args FROM messages
WHERE ts >= %(start)s AND ts < %(end)s AND role = 'assistant' AND tool_name = 'scratchpad'
  AND memory_shard(user_id, %(shards)s) = %(shard)s
  AND NOT EXISTS (SELECT 1 FROM session_forks f WHERE f.session_id = messages.session_id)
ORDER BY session_id, seq;

-- name: recall_delivered
SELECT chunk_id FROM recall_ledger WHERE session_id = %(session_id)s;

-- name: record_recall
INSERT INTO recall_ledger (session_id, chunk_id) VALUES (%(session_id)s, %(chunk_id)s)
ON CONFLICT (session_id, chunk_id) DO UPDATE SET delivered_at = clock_timestamp();

-- name: trim_recall_ledger
DELETE FROM recall_ledger
WHERE session_id = %(session_id)s AND chunk_id NOT IN (
    SELECT chunk_id FROM recall_ledger WHERE session_id = %(session_id)s
    ORDER BY delivered_at DESC, chunk_id DESC LIMIT %(keep)s);

-- name: session_summary_exists
SELECT EXISTS (SELECT 1 FROM session_summaries WHERE session_id = %(session_id)s
               AND summary <> '{}'::jsonb);

-- name: session_owner
SELECT user_id FROM sessions WHERE session_id = %(session_id)s;

-- name: session_decisions
-- The instructions (Do:/Don't: decisions) distilled from these sessions of one user: what a
-- served conversation settled, often turns after the question's best match.
SELECT id, entry_key, user_id, kind, title, content, tags, scope, scope_id, consent_basis, updated_at, session_id,
       seq_start, seq_end, version, NULL::float8 AS distance, 0::float4 AS text_rank, false AS text_match
FROM knowledge_entries
WHERE user_id = %(user_id)s AND session_id = ANY(%(session_ids)s) AND kind = 'instruction'
  AND (valid_until IS NULL OR valid_until > %(at)s)
ORDER BY session_id, seq_start, id;

-- name: knowledge_search
-- A scoped search: the user's entries (entity scope, and session scope for one session or
-- all of theirs), a process's entries when named, and global ones; expired ones leave.
SELECT id, entry_key, user_id, kind, title, content, tags, scope, scope_id, consent_basis, updated_at, session_id,
       seq_start, seq_end, version,
       CASE WHEN embedding_model = %(model)s THEN embedding <=> %(vector)s::halfvec END AS distance,
       ts_rank_cd(search_tsv, to_tsquery('simple', %(tsquery)s)) AS text_rank,
       search_tsv @@ to_tsquery('simple', %(tsquery)s) AS text_match
FROM knowledge_entries
WHERE (scope = 'global'
       OR (%(user_id)s::text IS NOT NULL AND user_id = %(user_id)s
           AND (scope = 'entity' OR (scope = 'session' AND (%(session_id)s::text IS NULL OR scope_id = %(session_id)s))))
       OR (scope = 'process' AND scope_id = %(process)s)
       OR %(all_users)s)
  AND (valid_until IS NULL OR valid_until > %(at)s)
  AND (%(consent)s::text IS NULL OR consent_basis = %(consent)s)
ORDER BY id;

-- name: count_fact_access
-- A search never waits to count an access: a row another transaction holds (a pipeline
-- run's write, a concurrent search's count) is skipped, so that access goes uncounted.
UPDATE memory_facts SET access_count = access_count + 1, last_accessed_at = now()
WHERE id IN (SELECT id FROM memory_facts WHERE id = ANY(%(ids)s) FOR NO KEY UPDATE SKIP LOCKED);

-- name: count_knowledge_access
UPDATE knowledge_entries SET access_count = access_count + 1, last_accessed_at = now()
WHERE id IN (SELECT id FROM knowledge_entries WHERE id = ANY(%(ids)s) FOR NO KEY UPDATE SKIP LOCKED);

-- name: error_search
-- Resolved tool errors still within their TTL; a hit renews it.
UPDATE error_memory e SET expires_at = greatest(e.expires_at, %(now)s + interval '90 days'), hit_count = hit_count + 1
WHERE e.id IN (
    SELECT id FROM error_memory
    WHERE user_id = %(user_id)s AND expires_at > %(now)s
      AND (tool ILIKE ANY(%(patterns)s) OR error ILIKE ANY(%(patterns)s) OR fix ILIKE ANY(%(patterns)s))
    ORDER BY observed_at DESC LIMIT %(limit)s)
RETURNING id, user_id, tool, error, fix, session_id, error_seq, fix_seq, observed_at, expires_at;

-- name: other_embedding_models
-- Whether the user's served vectors were made with another model than the configured one
-- (the embedder changed and the next run has not re-embedded them yet): a model per table.
SELECT DISTINCT embedding_model FROM (
    (SELECT embedding_model FROM memory_facts
     WHERE (%(all_users)s OR user_id = %(user_id)s) AND merged_into IS NULL AND embedding_model <> %(model)s LIMIT 1)
    UNION ALL
    (SELECT embedding_model FROM memory_chunks
     WHERE (%(all_users)s OR user_id = %(user_id)s) AND embedding_model <> %(model)s LIMIT 1)
    UNION ALL
    (SELECT embedding_model FROM knowledge_entries
     WHERE (%(all_users)s OR user_id = %(user_id)s) AND embedding_model <> %(model)s LIMIT 1)
    UNION ALL
    (SELECT embedding_model FROM memory_turns
     WHERE (%(all_users)s OR user_id = %(user_id)s) AND embedding_model <> %(model)s LIMIT 1)
) AS found ORDER BY 1;

-- name: embedding_model_counts
-- Served rows per table and embedding model (NULL: not embedded yet).
SELECT 'memory_facts' AS source_table, embedding_model, count(*) FROM memory_facts WHERE merged_into IS NULL GROUP BY 2
UNION ALL
SELECT 'memory_chunks', embedding_model, count(*) FROM memory_chunks GROUP BY 2
UNION ALL
SELECT 'knowledge_entries', embedding_model, count(*) FROM knowledge_entries GROUP BY 2
UNION ALL
SELECT 'memory_turns', embedding_model, count(*) FROM memory_turns GROUP BY 2
ORDER BY 1, 2 NULLS LAST;

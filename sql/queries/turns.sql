-- The turn-level index: memory_turns and its BM25 statistics (memory_pipelines.core.turn_index).

-- name: sessions_to_index
-- The sessions to index again for the days first..last ([start, end)): those with messages
-- in them, and those whose chunks (breadcrumbs) or summary (keys) those days' runs wrote.
SELECT session_id FROM messages WHERE ts >= %(start)s AND ts < %(end)s AND memory_shard(user_id, %(shards)s) = %(shard)s
UNION
SELECT session_id FROM memory_chunks WHERE partition_key BETWEEN %(first)s::text AND %(last)s::text AND memory_shard(user_id, %(shards)s) = %(shard)s
UNION
SELECT session_id FROM session_summary_versions
WHERE partition_key BETWEEN %(first)s::text AND %(last)s::text AND memory_shard(user_id, %(shards)s) = %(shard)s
ORDER BY 1;

-- name: sessions_search_keys
-- Each session's chunk breadcrumbs and its current summary's keys, by session and key.
SELECT session_id, k FROM (
    SELECT session_id, unnest(breadcrumbs) AS k FROM memory_chunks WHERE session_id = ANY(%(session_ids)s)
    UNION
    SELECT session_id, jsonb_array_elements_text(summary -> 'keys') FROM session_summaries
    WHERE session_id = ANY(%(session_ids)s) AND jsonb_typeof(summary -> 'keys') = 'array'
) AS found
ORDER BY session_id, k;

-- name: stored_turn_hashes
-- What the sessions' stored turns hold and what their embeddings read, to send only changes.
SELECT session_id, seq, content_hash, window_hash FROM memory_turns WHERE session_id = ANY(%(session_ids)s);

-- name: create_turn_load
-- Made once a connection, emptied by each commit and each batch (one round trip: no
-- parameters): made and dropped per batch, its catalog writes cost a long backfill more than its rows.
-- A batch's changed turns arrive by COPY and are upserted by one statement (a statement per
-- turn cost more than computing their lexemes). Migration 0015 names it by its old name, upsert_turn.
CREATE TEMP TABLE IF NOT EXISTS turn_load (
    session_id text, seq bigint, user_id text, pos bigint, role text, ts timestamptz, language text, body text,
    keys text[], content_hash text, window_hash text
) ON COMMIT DELETE ROWS;
DELETE FROM turn_load;  -- a second batch in the same transaction starts empty

-- name: upsert_turns_from_load
-- Rewritten only when what it holds or what its embedding reads changed; a new window drops
-- the embedding (memory_embeddings makes it again). The partition is the turn's own day.
INSERT INTO memory_turns AS t (session_id, seq, user_id, pos, role, ts, language, body, keys, tsv, body_length,
                               content_hash, window_hash, partition_key, run_id)
SELECT session_id, seq, user_id, pos, role, ts, language, body, keys,
       memory_turn_tsv_of(lexemes, language, keys, user_id), memory_turn_length_of(lexemes),
       content_hash, window_hash, to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD'), %(run_id)s
FROM turn_load, LATERAL memory_turn_lexemes(language, body) AS lexemes  -- a function scan: computed once a row
ON CONFLICT (session_id, seq) DO UPDATE
SET user_id = EXCLUDED.user_id, pos = EXCLUDED.pos, role = EXCLUDED.role, ts = EXCLUDED.ts,
    language = EXCLUDED.language, body = EXCLUDED.body, keys = EXCLUDED.keys, tsv = EXCLUDED.tsv,
    body_length = EXCLUDED.body_length, content_hash = EXCLUDED.content_hash, window_hash = EXCLUDED.window_hash,
    embedding = CASE WHEN t.window_hash = EXCLUDED.window_hash THEN t.embedding END,
    embedding_model = CASE WHEN t.window_hash = EXCLUDED.window_hash THEN t.embedding_model END,
    partition_key = EXCLUDED.partition_key, run_id = EXCLUDED.run_id
WHERE t.content_hash <> EXCLUDED.content_hash OR t.window_hash <> EXCLUDED.window_hash;

-- name: delete_turns
-- The turns at these (session, seq) pairs: stored ones their sessions no longer have.
DELETE FROM memory_turns t
USING unnest(%(session_ids)s::text[], %(seqs)s::bigint[]) AS gone(session_id, seq)
WHERE t.session_id = gone.session_id AND t.seq = gone.seq;

-- name: delete_turn_stats
DELETE FROM memory_turn_stats WHERE user_id = ANY(%(user_ids)s);

-- name: insert_turn_stats
INSERT INTO memory_turn_stats (user_id, language, turns, total_length)
SELECT user_id, language, count(*), sum(body_length) FROM memory_turns WHERE user_id = ANY(%(user_ids)s)
GROUP BY user_id, language;

-- name: turn_text_search
-- A named session holds its subagents' sessions (`<session>:agent-<id>`, docs/formats.md).
-- BM25 over the user's turns (every user's with all_users): the query stemmed in each
-- language the user's turns are in, candidates from the turns holding any of its lexemes
-- (so each lexeme's document frequency is exact; the owner's lexeme keeps the index to the
-- user's turns), term frequencies from the positions of the allowed weights (A: the body, B:
-- breadcrumbs and summary keys), lengths and corpus size from memory_turn_stats. Lexemes
-- become tsquery literals quoted here, never by the caller.
WITH stats AS (
    SELECT sum(turns)::float8 AS n, sum(total_length)::float8 / greatest(sum(turns), 1) AS avgdl,
           array_agg(DISTINCT language) AS languages
    FROM memory_turn_stats WHERE %(all_users)s OR user_id = %(user_id)s
),
terms AS (
    SELECT DISTINCT v.lexeme
    FROM stats, unnest(stats.languages) AS cfg, unnest(memory_turn_lexemes(cfg, %(text)s)) AS v
),
q AS (
    SELECT CASE WHEN %(all_users)s THEN matching
                ELSE matching && ('''' || memory_turn_owner(%(user_id)s) || '''')::tsquery END AS query
    FROM (SELECT string_agg('''' || replace(replace(lexeme, '\', '\\'), '''', '''''') || ''':' || %(weights)s::text,
                            ' | ')::tsquery AS matching
          FROM terms) AS m
),
candidates AS (
    SELECT t.user_id, t.session_id, t.seq, t.pos, t.ts, t.body_length, t.tsv
    FROM memory_turns t, q
    WHERE (%(all_users)s OR t.user_id = %(user_id)s) AND t.tsv @@ q.query
      AND (%(session_id)s::text IS NULL OR t.session_id = %(session_id)s::text
           OR starts_with(t.session_id, %(session_id)s::text || ':agent-'))
      -- a fork's turns only when asked for (or its session named)
      AND (%(include_forks)s OR %(session_id)s::text IS NOT NULL
           OR NOT EXISTS (SELECT 1 FROM session_forks f WHERE f.session_id = t.session_id))
),
frequencies AS (
    SELECT c.user_id, c.session_id, c.seq, c.pos, c.ts, c.body_length, v.lexeme,
           (SELECT count(*) FROM unnest(v.weights) AS w WHERE strpos(%(weights)s::text, w::text) > 0) AS tf
    FROM candidates c, unnest(c.tsv) AS v
    WHERE v.lexeme IN (SELECT lexeme FROM terms)
),
documents AS (SELECT lexeme, count(*) AS df FROM frequencies WHERE tf > 0 GROUP BY lexeme)
SELECT f.user_id, f.session_id, f.seq, f.pos, f.ts,
       sum(ln(1 + (s.n - d.df + 0.5) / (d.df + 0.5)) * f.tf * (%(k1)s + 1)
           / (f.tf + %(k1)s * (1 - %(b)s + %(b)s * f.body_length / s.avgdl)))::float8 AS score,
       array_agg(f.lexeme ORDER BY f.lexeme) AS matched
FROM frequencies f JOIN documents d USING (lexeme) CROSS JOIN stats s
WHERE f.tf > 0 AND (%(since)s::timestamptz IS NULL OR f.ts >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR f.ts < %(until)s::timestamptz)
GROUP BY f.user_id, f.session_id, f.seq, f.pos, f.ts
ORDER BY score DESC, f.session_id, f.seq
LIMIT %(limit)s;

-- name: turn_vector_search
-- The exact nearest turns (read with their neighbours) over the user's rows.
SELECT user_id, session_id, seq, pos, ts, (embedding <=> %(vector)s::halfvec)::float8 AS distance
FROM memory_turns
WHERE (%(all_users)s OR user_id = %(user_id)s) AND embedding_model = %(model)s
  AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s::text
       OR starts_with(session_id, %(session_id)s::text || ':agent-'))
  AND (%(include_forks)s OR %(session_id)s::text IS NOT NULL
       OR NOT EXISTS (SELECT 1 FROM session_forks f WHERE f.session_id = memory_turns.session_id))
  AND (%(since)s::timestamptz IS NULL OR ts >= %(since)s::timestamptz)
  AND (%(until)s::timestamptz IS NULL OR ts < %(until)s::timestamptz)
ORDER BY embedding <=> %(vector)s::halfvec, session_id, seq
LIMIT %(limit)s;

-- name: turn_windows
-- The turns of passages: per session, the positions from lo to hi, of the user searched.
SELECT t.id, t.user_id, t.session_id, t.seq, t.pos, t.role, t.ts, t.body
FROM unnest(%(session_ids)s::text[], %(los)s::int[], %(his)s::int[]) AS w(session_id, lo, hi)
JOIN memory_turns t ON t.session_id = w.session_id AND t.pos BETWEEN w.lo AND w.hi
WHERE %(all_users)s OR t.user_id = %(user_id)s
ORDER BY t.session_id, t.pos;

-- name: newest_turn
-- The newest turn time of a user (every user's with all_users): what relative times count from.
SELECT max(ts) FROM memory_turns WHERE %(all_users)s OR user_id = %(user_id)s;

-- name: chunk_turns
-- The turns a chunk holds, of its user.
SELECT id, session_id, seq, pos, role, ts, body FROM memory_turns
WHERE session_id = %(session_id)s AND user_id = %(user_id)s AND seq BETWEEN %(first)s AND %(last)s
ORDER BY pos;

-- name: turn_decay_candidates
-- A user's turns (or one session's), for decay-scored retrieval.
SELECT id, session_id, seq, role, ts, body, access_count, last_accessed_at FROM memory_turns
WHERE user_id = %(user_id)s AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s)
ORDER BY session_id, seq;

-- name: turn_citations
-- What cites the user's turns (or one session's): knowledge entries and facts (hidden
-- re-spellings too: they are evidence of the same fact), each with its seq span, kind,
-- importance (a fact's from its confidence, 0-100) and text.
SELECT session_id, seq_start, seq_end, kind, importance::float8 AS importance, NULL::float8 AS confidence,
       title || ' ' || content AS text
FROM knowledge_entries
WHERE user_id = %(user_id)s AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s)
UNION ALL
SELECT session_id, seq_start, seq_end, 'fact', NULL, confidence / 100.0, replace(key, '_', ' ') || ' ' || value
FROM memory_facts
WHERE user_id = %(user_id)s AND (%(session_id)s::text IS NULL OR session_id = %(session_id)s)
ORDER BY 1, 2, 3, 4, 7;

-- name: count_turn_access
-- Served turns count an access (decay-scored turns get a boost); as count_fact_access, a
-- row another transaction holds is skipped rather than waited for.
UPDATE memory_turns SET access_count = access_count + 1, last_accessed_at = now()
WHERE id IN (SELECT id FROM memory_turns WHERE id = ANY(%(ids)s) FOR NO KEY UPDATE SKIP LOCKED);

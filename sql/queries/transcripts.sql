-- name: lock_transcript_writes
-- Serializes read-decide-write of the archive across runs (released at commit).
SELECT pg_advisory_xact_lock(hashtext('memory_pipelines.transcripts'));

-- name: stored_messages
-- Only the scanned keys: a long-lived session's whole history is not read again each day.
SELECT m.session_id, m.seq, m.content_hash, m.user_id
FROM unnest(%(session_ids)s::text[], %(seqs)s::bigint[]) AS k (session_id, seq)
JOIN messages m USING (session_id, seq);

-- name: session_owners
SELECT session_id, user_id FROM sessions WHERE session_id = ANY(%(session_ids)s);

-- name: copy_messages
-- In binary, each value sent as its column's type (insert_messages names them, in this order).
COPY messages (session_id, seq, user_id, agent_id, role, content, ts, tool_name, tool_args,
               tool_call_id, metadata, content_hash, source_file, source_line, ingested_run_id)
FROM STDIN (FORMAT BINARY);

-- name: insert_quarantine
INSERT INTO quarantine (source_file, source_line, reason, detail, raw, raw_bytes, session_id, seq,
                        partition_key, run_id)
VALUES (%(source_file)s, %(source_line)s, %(reason)s, %(detail)s, %(raw)s, %(raw_bytes)s,
        %(session_id)s, %(seq)s, %(partition_key)s, %(run_id)s)
-- the same record refused again stays one row, open again if a run had resolved it
ON CONFLICT (source_file, source_line, reason, raw_md5) DO UPDATE
SET resolved_at = NULL, resolved_by_run = NULL
WHERE quarantine.resolved_at IS NOT NULL;

-- name: open_quarantine_files
-- Which of these files have refusals still open.
SELECT DISTINCT source_file FROM quarantine WHERE resolved_at IS NULL AND source_file = ANY(%(files)s);

-- name: resolve_held_refusals
-- The open refusals of records the archive now holds (the archive has their session and seq
-- with the same content hash), as read from the same file and line (line 0, the whole file:
-- any line of it) and, when the refusal names a session and seq, with that session and seq:
-- the line's other records (an openai conversation gives several) leave it open.
UPDATE quarantine AS q
SET resolved_at = now(), resolved_by_run = %(run_id)s
FROM (SELECT DISTINCT k.source_file, k.source_line, k.session_id, k.seq
      FROM unnest(%(files)s::text[], %(lines)s::bigint[], %(session_ids)s::text[], %(seqs)s::bigint[],
                  %(hashes)s::text[]) AS k (source_file, source_line, session_id, seq, content_hash)
      JOIN messages AS m ON m.session_id = k.session_id AND m.seq = k.seq AND m.content_hash = k.content_hash) AS h
WHERE q.resolved_at IS NULL AND q.source_file = h.source_file
  AND (q.source_line = h.source_line OR q.source_line = 0)
  AND (q.session_id IS NULL OR q.seq IS NULL OR (q.session_id, q.seq) = (h.session_id, h.seq));

-- name: resolve_clean_file_refusals
-- The open refusals of files whose latest scan under the run's settings (their index entry)
-- refuses none of their records: a line fixed, a setting such as MEMORY_SOURCE_USER given.
-- A conflict with the archive (a scan does not see those) stays for its own record to settle.
UPDATE quarantine AS q
SET resolved_at = now(), resolved_by_run = %(run_id)s
FROM transcript_objects AS o
WHERE o.location = %(location)s AND o.name = ANY(%(files)s) AND o.scan_key = %(scan_key)s AND o.refused = 0
  AND q.source_file = o.name AND q.resolved_at IS NULL
  AND q.reason NOT IN ('conflicting_duplicate', 'user_mismatch', 'fork_mismatch');

-- name: quarantine_rows
-- The quarantine for `memory-pipelines quarantine`: open rows, resolved rows, or both.
SELECT id, source_file, source_line, reason, detail, raw, raw_bytes, session_id, seq, partition_key, run_id,
       quarantined_at, resolved_at, resolved_by_run
FROM quarantine
WHERE ((%(open)s AND resolved_at IS NULL) OR (%(resolved)s AND resolved_at IS NOT NULL))
  AND (%(reason)s::text IS NULL OR reason = %(reason)s)
ORDER BY resolved_at IS NOT NULL, source_file, source_line, reason, id
LIMIT %(limit)s;

-- name: quarantine_totals
-- How many refusals are open and how many resolved (of one reason, if given).
SELECT count(*) FILTER (WHERE resolved_at IS NULL), count(*) FILTER (WHERE resolved_at IS NOT NULL)
FROM quarantine WHERE %(reason)s::text IS NULL OR reason = %(reason)s;

-- name: refresh_sessions
-- Recomputes the touched sessions from the archive; rows that did not change are not written.
INSERT INTO sessions AS s (session_id, user_id, agent_id, first_message_at, last_active, message_count)
SELECT session_id,
       min(user_id),
       (array_agg(agent_id ORDER BY seq) FILTER (WHERE agent_id IS NOT NULL))[1],
       min(ts), max(ts), count(*)
FROM messages
WHERE session_id = ANY(%(session_ids)s)
GROUP BY session_id
ON CONFLICT (session_id) DO UPDATE
SET user_id = EXCLUDED.user_id,
    agent_id = EXCLUDED.agent_id,
    first_message_at = EXCLUDED.first_message_at,
    last_active = EXCLUDED.last_active,
    message_count = EXCLUDED.message_count
WHERE (s.user_id, s.agent_id, s.first_message_at, s.last_active, s.message_count)
      IS DISTINCT FROM
      (EXCLUDED.user_id, EXCLUDED.agent_id, EXCLUDED.first_message_at, EXCLUDED.last_active, EXCLUDED.message_count);

-- name: table_row_count
SELECT count(*) FROM {table};

-- name: session_fork_points
-- The fork points stored for these sessions (forks among them).
SELECT session_id, parent_session_id, fork_seq, user_id FROM session_forks WHERE session_id = ANY(%(session_ids)s);

-- name: superseded_keys
-- The turns replace merges set aside of these sessions, while the merge is in force.
SELECT x.session_id, x.seq, x.content_hash
FROM superseded_messages x JOIN session_merges g ON g.id = x.merge_id AND g.restored_at IS NULL
WHERE x.session_id = ANY(%(session_ids)s);

-- name: insert_session_fork
INSERT INTO session_forks (session_id, parent_session_id, fork_seq, user_id, created_by)
VALUES (%(session_id)s, %(parent_session_id)s, %(fork_seq)s, %(user_id)s, %(created_by)s)
ON CONFLICT (session_id) DO NOTHING;

-- name: session_forks_of
-- A session's forks, oldest first, with their summaries' current discussion.
SELECT f.session_id, f.parent_session_id, f.fork_seq, f.user_id, coalesce(s.summary ->> 'current_discussion', '')
FROM session_forks f LEFT JOIN session_summaries s ON s.session_id = f.session_id
WHERE f.parent_session_id = %(session_id)s
ORDER BY f.created_at, f.session_id;

-- name: transcript_objects_of
SELECT name, size, mtime_ns, etag, scan_key, format, records, refused, undated, days
FROM transcript_objects WHERE location = %(location)s ORDER BY name;

-- name: upsert_transcript_object
INSERT INTO transcript_objects (location, name, size, mtime_ns, etag, scan_key, format, records, refused, undated, days)
VALUES (%(location)s, %(name)s, %(size)s, %(mtime_ns)s, %(etag)s, %(scan_key)s, %(format)s, %(records)s,
        %(refused)s, %(undated)s, %(days)s)
ON CONFLICT (location, name) DO UPDATE SET
    size = EXCLUDED.size, mtime_ns = EXCLUDED.mtime_ns, etag = EXCLUDED.etag, scan_key = EXCLUDED.scan_key,
    format = EXCLUDED.format, records = EXCLUDED.records, refused = EXCLUDED.refused,
    undated = EXCLUDED.undated, days = EXCLUDED.days, scanned_at = now();

-- name: delete_transcript_objects
DELETE FROM transcript_objects WHERE location = %(location)s AND name = ANY(%(names)s);

-- name: source_table_columns
-- The columns of an agent's own message table or view (a postgresql:// transcript source);
-- %(table)s is the name as SQL writes it (quoted where needed).
SELECT a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_attribute AS a
WHERE a.attrelid = to_regclass(%(table)s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum;

-- name: source_table_days
-- The UTC days (days since 1970-01-01) a source table's rows fall on within [start, end).
SELECT DISTINCT floor(extract(epoch FROM {ts}::timestamptz) / 86400)::int AS day
FROM {table} WHERE {ts}::timestamptz >= %(start)s AND {ts}::timestamptz < %(end)s ORDER BY day;

-- name: source_table_first_day
-- The UTC day of a source table's earliest row (NULL: no row has a time).
SELECT floor(extract(epoch FROM min({ts})::timestamptz) / 86400)::int FROM {table};

-- name: source_table_rows
-- A window's rows of a source table as JSON (and, with undated, the rows with no time),
-- read through a server-side cursor in batches.
SELECT to_jsonb(t)::text FROM {table} AS t
WHERE ({ts}::timestamptz >= %(start)s AND {ts}::timestamptz < %(end)s) OR (%(undated)s AND {ts} IS NULL)
ORDER BY {session}, {seq};

-- name: source_table_inventory
SELECT count(*), count(*) FILTER (WHERE {ts} IS NULL),
       min(floor(extract(epoch FROM {ts}::timestamptz) / 86400)::int),
       max(floor(extract(epoch FROM {ts}::timestamptz) / 86400)::int),
       count(DISTINCT floor(extract(epoch FROM {ts}::timestamptz) / 86400)::int)
FROM {table};

-- name: source_table_watermark
SELECT max({watermark})::text FROM {table};

-- name: source_table_days_past
-- The UTC days of the rows whose watermark passed the last one a sensor saw.
SELECT DISTINCT floor(extract(epoch FROM {ts}::timestamptz) / 86400)::int AS day, count(*) OVER () AS rows
FROM {table} WHERE {watermark} > %(last)s AND {ts} IS NOT NULL ORDER BY day;

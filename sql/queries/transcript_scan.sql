-- DuckDB queries over transcript files (not PostgreSQL).

-- name: scan_records
-- Validates every raw record of `raw_records` in one pass and attributes it to an event
-- time: its own `ts`, else the nearest datable record of the same file, else the day of
-- $location_days (days with datable records anywhere in the location) nearest the file's
-- modification time (ties: the earlier day), so a file with no readable time never opens a
-- partition of its own; else none (undated).
CREATE OR REPLACE TABLE validated_records AS
WITH parsed AS (
    SELECT r.*,
           json_valid(r.raw) AS is_json,
           CASE WHEN json_valid(r.raw) AND json_type(r.raw) = 'OBJECT' THEN r.raw::JSON END AS j
    FROM raw_records AS r
), extracted AS (
    -- every field parsed out of the record at once (a json_type or ->> per field parses the
    -- whole record again: about five times the memory)
    SELECT p.*, json_extract(j, ['$.session_id', '$.user_id', '$.seq', '$.role', '$.content', '$.ts', '$.agent_id', '$.tool_name', '$.tool_call_id', '$.tool_args', '$.metadata', '$.parent_session_id', '$.fork_seq']) AS v
    FROM parsed AS p
), fields AS (
    SELECT e.* EXCLUDE (v),
           json_type(v[1]) AS t_session_id, v[1] ->> '$' AS session_id,
           json_type(v[2]) AS t_user_id, v[2] ->> '$' AS user_id,
           json_type(v[3]) AS t_seq, v[3] ->> '$' AS seq_text,
           json_type(v[4]) AS t_role, v[4] ->> '$' AS role,
           json_type(v[5]) AS t_content, v[5] ->> '$' AS content,
           json_type(v[6]) AS t_ts, v[6] ->> '$' AS ts_text,
           json_type(v[7]) AS t_agent_id, v[7] ->> '$' AS agent_id,
           json_type(v[8]) AS t_tool_name, v[8] ->> '$' AS tool_name,
           json_type(v[9]) AS t_tool_call_id, v[9] ->> '$' AS tool_call_id,
           json_type(v[10]) AS t_tool_args, v[10] ->> '$' AS tool_args_text,
           json_type(v[11]) AS t_metadata, v[11] ->> '$' AS metadata_text,
           json_type(v[12]) AS t_parent_session_id, v[12] ->> '$' AS parent_session_id,
           json_type(v[13]) AS t_fork_seq, v[13] ->> '$' AS fork_seq_text,
           list_filter([CASE WHEN coalesce(json_type(v[1]), 'NULL') = 'NULL' THEN 'session_id' END,
                        CASE WHEN coalesce(json_type(v[2]), 'NULL') = 'NULL' THEN 'user_id' END,
                        CASE WHEN coalesce(json_type(v[3]), 'NULL') = 'NULL' THEN 'seq' END,
                        CASE WHEN coalesce(json_type(v[4]), 'NULL') = 'NULL' THEN 'role' END,
                        CASE WHEN coalesce(json_type(v[5]), 'NULL') = 'NULL' THEN 'content' END,
                        CASE WHEN coalesce(json_type(v[6]), 'NULL') = 'NULL' THEN 'ts' END],
                       lambda m: m IS NOT NULL) AS missing
    FROM extracted AS e
), timed AS (
    SELECT f.*,
           CASE
               WHEN t_ts IN ('BIGINT', 'UBIGINT')
                   THEN try(timezone('UTC', make_timestamp(try_cast(ts_text AS BIGINT) // 1000)))
               WHEN t_ts = 'VARCHAR' AND regexp_full_match(
                        ts_text,
                        '\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}(:?\d{2})?)?')
                   THEN try_cast(ts_text AS TIMESTAMPTZ)
           END AS ts_raw
    FROM fields AS f
), bounded AS (
    SELECT t.*,
           CASE WHEN ts_raw >= TIMESTAMPTZ '2000-01-01 00:00:00+00'
                 AND ts_raw < TIMESTAMPTZ '2200-01-01 00:00:00+00' THEN ts_raw END AS ts
    FROM timed AS t
), judged AS (
    SELECT b.*,
           CASE
               WHEN pre_reason IS NOT NULL THEN pre_reason
               WHEN raw_bytes > $max_bytes THEN 'too_large'
               WHEN NOT is_json THEN 'malformed_json'
               WHEN j IS NULL THEN 'not_an_object'
               WHEN len(missing) > 0 THEN 'missing_field'
               WHEN t_session_id <> 'VARCHAR' OR t_user_id <> 'VARCHAR' OR t_role <> 'VARCHAR'
                 OR t_content <> 'VARCHAR' OR t_seq NOT IN ('BIGINT', 'UBIGINT')
                 OR t_ts NOT IN ('VARCHAR', 'BIGINT', 'UBIGINT')
                 OR coalesce(t_agent_id, 'NULL') NOT IN ('VARCHAR', 'NULL')
                 OR coalesce(t_tool_name, 'NULL') NOT IN ('VARCHAR', 'NULL')
                 OR coalesce(t_tool_call_id, 'NULL') NOT IN ('VARCHAR', 'NULL')
                 OR coalesce(t_tool_args, 'NULL') NOT IN ('OBJECT', 'VARCHAR', 'NULL')
                 OR coalesce(t_metadata, 'NULL') NOT IN ('OBJECT', 'VARCHAR', 'NULL')
                 OR (t_tool_args = 'VARCHAR' AND NOT coalesce(json_valid(tool_args_text) AND json_type(tool_args_text) = 'OBJECT', false))
                 OR (t_metadata = 'VARCHAR' AND NOT coalesce(json_valid(metadata_text) AND json_type(metadata_text) = 'OBJECT', false))
                 OR try_cast(seq_text AS BIGINT) IS NULL OR try_cast(seq_text AS BIGINT) < 0
                 OR trim(session_id) = '' OR trim(user_id) = ''
                 OR coalesce(t_parent_session_id, 'NULL') NOT IN ('VARCHAR', 'NULL') OR trim(coalesce(parent_session_id, 'x')) = ''
                 OR coalesce(t_fork_seq, 'NULL') NOT IN ('BIGINT', 'UBIGINT', 'NULL') OR try_cast(fork_seq_text AS BIGINT) < 0
                 OR (coalesce(t_parent_session_id, 'NULL') = 'NULL') <> (coalesce(t_fork_seq, 'NULL') = 'NULL')
                   THEN 'invalid_type'
               WHEN role NOT IN ('user', 'assistant', 'tool', 'system') THEN 'unknown_role'
               WHEN ts IS NULL THEN 'invalid_timestamp'
               WHEN contains(content, chr(0)) OR contains(session_id, chr(0)) OR contains(user_id, chr(0))
                 OR contains(coalesce(agent_id, ''), chr(0)) OR contains(coalesce(tool_name, ''), chr(0))
                 OR contains(coalesce(tool_call_id, ''), chr(0)) OR contains(coalesce(parent_session_id, ''), chr(0))
                 OR contains(coalesce(tool_args_text, ''), '\u0000') OR contains(coalesce(metadata_text, ''), '\u0000')
                   THEN 'nul_byte'
           END AS reason
    FROM bounded AS b
), filled AS (
    SELECT j2.*,
           epoch_us(coalesce(
               ts,
               last_value(ts IGNORE NULLS) OVER (PARTITION BY source ORDER BY line
                                                 ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW),
               first_value(ts IGNORE NULLS) OVER (PARTITION BY source ORDER BY line
                                                  ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING)
           )) AS file_us
    FROM judged AS j2
), datable_days AS (
    -- the location's days, from every file's index entry (a file is validated on its own)
    SELECT unnest(CAST($location_days AS BIGINT[])) AS day
), attributed AS (
    SELECT f.*,
           coalesce(file_us, (
               SELECT arg_min(d.day, 2 * abs(d.day - f.file_mtime_us // 86400000000)
                                     + CASE WHEN d.day > f.file_mtime_us // 86400000000 THEN 1 ELSE 0 END)
               FROM datable_days AS d) * 86400000000) AS event_us
    FROM filled AS f
)
SELECT source, line, raw_bytes, reason,
       CASE WHEN pre_reason IS NOT NULL THEN pre_detail ELSE CASE reason
           WHEN 'too_large' THEN 'record of ' || raw_bytes || ' bytes exceeds the cap of ' || $max_bytes || ' bytes'
           WHEN 'malformed_json' THEN 'not valid JSON'
           WHEN 'not_an_object' THEN 'a message must be a JSON object, got ' || CASE json_type(raw)
               WHEN 'VARCHAR' THEN 'a string' WHEN 'ARRAY' THEN 'an array' WHEN 'NULL' THEN 'null'
               WHEN 'BOOLEAN' THEN 'a boolean' ELSE 'a number' END
           WHEN 'missing_field' THEN 'missing required field(s): ' || array_to_string(missing, ', ')
           WHEN 'invalid_type' THEN 'ill-typed field(s): '
               || array_to_string(list_filter([
                      CASE WHEN t_session_id <> 'VARCHAR' OR trim(session_id) = '' THEN 'session_id must be a non-empty string' END,
                      CASE WHEN t_user_id <> 'VARCHAR' OR trim(user_id) = '' THEN 'user_id must be a non-empty string' END,
                      CASE WHEN t_seq NOT IN ('BIGINT', 'UBIGINT') OR try_cast(seq_text AS BIGINT) IS NULL
                             OR try_cast(seq_text AS BIGINT) < 0 THEN 'seq must be a non-negative integer' END,
                      CASE WHEN t_role <> 'VARCHAR' THEN 'role must be a string' END,
                      CASE WHEN t_content <> 'VARCHAR' THEN 'content must be a string' END,
                      CASE WHEN t_ts NOT IN ('VARCHAR', 'BIGINT', 'UBIGINT') THEN 'ts must be an RFC 3339 string or epoch nanoseconds' END,
                      CASE WHEN coalesce(t_agent_id, 'NULL') NOT IN ('VARCHAR', 'NULL') THEN 'agent_id must be a string' END,
                      CASE WHEN coalesce(t_tool_name, 'NULL') NOT IN ('VARCHAR', 'NULL') THEN 'tool_name must be a string' END,
                      CASE WHEN coalesce(t_tool_call_id, 'NULL') NOT IN ('VARCHAR', 'NULL') THEN 'tool_call_id must be a string' END,
                      CASE WHEN coalesce(t_tool_args, 'NULL') NOT IN ('OBJECT', 'VARCHAR', 'NULL')
                             OR (t_tool_args = 'VARCHAR' AND NOT coalesce(json_valid(tool_args_text) AND json_type(tool_args_text) = 'OBJECT', false))
                           THEN 'tool_args must be a JSON object' END,
                      CASE WHEN coalesce(t_metadata, 'NULL') NOT IN ('OBJECT', 'VARCHAR', 'NULL')
                             OR (t_metadata = 'VARCHAR' AND NOT coalesce(json_valid(metadata_text) AND json_type(metadata_text) = 'OBJECT', false))
                           THEN 'metadata must be a JSON object' END,
                      CASE WHEN coalesce(t_parent_session_id, 'NULL') NOT IN ('VARCHAR', 'NULL') OR trim(coalesce(parent_session_id, 'x')) = ''
                           THEN 'parent_session_id must be a non-empty string' END,
                      CASE WHEN coalesce(t_fork_seq, 'NULL') NOT IN ('BIGINT', 'UBIGINT', 'NULL') OR try_cast(fork_seq_text AS BIGINT) < 0
                           THEN 'fork_seq must be a non-negative integer' END,
                      CASE WHEN (coalesce(t_parent_session_id, 'NULL') = 'NULL') <> (coalesce(t_fork_seq, 'NULL') = 'NULL')
                           THEN 'parent_session_id and fork_seq go together: a fork names both' END
                  ], lambda m: m IS NOT NULL), '; ')
           WHEN 'unknown_role' THEN 'unknown role ' || to_json(role)::VARCHAR || ' (expected user, assistant, tool or system)'
           WHEN 'invalid_timestamp' THEN 'unparsable or out-of-range timestamp ' || left(coalesce(ts_text, ''), 80)
           WHEN 'nul_byte' THEN 'a text field holds a NUL character'
       END END AS detail,
       CASE WHEN reason IS NOT NULL THEN left(raw, 4000) END AS raw,  -- quarantine keeps it; a message does not
       CASE WHEN t_session_id = 'VARCHAR' THEN session_id END AS session_id,
       user_id, try_cast(seq_text AS BIGINT) AS seq, role, content,
       epoch_us(ts) AS ts_us,
       agent_id, tool_name, tool_call_id,
       CASE WHEN t_tool_args IN ('OBJECT', 'VARCHAR') THEN tool_args_text END AS tool_args,
       CASE WHEN t_metadata IN ('OBJECT', 'VARCHAR') THEN metadata_text END AS metadata,
       CASE WHEN t_parent_session_id = 'VARCHAR' THEN parent_session_id END AS parent_session_id,
       CASE WHEN t_fork_seq IN ('BIGINT', 'UBIGINT') THEN try_cast(fork_seq_text AS BIGINT) END AS fork_seq,
       event_us
FROM attributed;

-- name: window_records
-- A window's records; with $undated, also those no readable time dates (the run's own range).
SELECT * FROM validated_records
WHERE (event_us >= $start_us AND event_us < $end_us) OR ($undated AND event_us IS NULL)
ORDER BY source, line;

-- name: window_records_of
-- The same, of some of the files validated together ($sources).
SELECT * FROM validated_records
WHERE source = ANY($sources)
  AND ((event_us >= $start_us AND event_us < $end_us) OR ($undated AND event_us IS NULL))
ORDER BY source, line;

-- name: file_summaries
-- What each file's index entry keeps (files validated with no location days): its records,
-- those refused, those no time of its own dates, and the UTC days its own times fall on
-- (a source event that is no turn, `skipped_event`, is counted in none but dates its day).
SELECT source, count(*) FILTER (WHERE reason IS DISTINCT FROM 'skipped_event'),
       count(reason) FILTER (WHERE reason <> 'skipped_event'),
       count(*) FILTER (WHERE event_us IS NULL AND reason IS DISTINCT FROM 'skipped_event'),
       coalesce(list(DISTINCT event_us // 86400000000 ORDER BY event_us // 86400000000)
                FILTER (WHERE event_us IS NOT NULL), [])
FROM validated_records
GROUP BY source;

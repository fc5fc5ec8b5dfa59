-- name: first_transcript_day
-- The first UTC day of transcripts the database knows, where the daily partitions start
-- (assets/partition_start.py): its earliest stored message (an index scan of
-- messages_ts_idx) or the earliest day of a file in the transcript index (days since
-- 1970-01-01; `memory-pipelines run` and the sensor index a location before they pick its
-- days). NULL when it knows none (LEAST skips a NULL).
SELECT LEAST((SELECT (min(ts) AT TIME ZONE 'UTC')::date FROM messages),
             (SELECT date '1970-01-01' + min(d.day) FROM transcript_objects AS o, unnest(o.days) AS d(day)));

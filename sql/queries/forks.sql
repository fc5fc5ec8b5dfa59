-- Forks and merges (memory_pipelines.forks).

-- name: session_seq_range
-- A session's first and last seq and its user (none: no such session).
SELECT min(seq), max(seq), min(user_id) FROM messages WHERE session_id = %(session_id)s HAVING count(*) > 0;

-- name: merge_in_force
SELECT id, fork_session_id, parent_session_id, user_id, mode, fork_seq, fork_first_seq, fork_last_seq,
       parent_first_seq, parent_last_seq, superseded_first_seq, superseded_last_seq, first_changed_day,
       merged_by, merged_at
FROM session_merges
WHERE fork_session_id = %(fork_session_id)s AND parent_session_id = %(parent_session_id)s AND restored_at IS NULL;

-- name: insert_merge
INSERT INTO session_merges (fork_session_id, parent_session_id, user_id, mode, fork_seq, fork_first_seq,
                            fork_last_seq, parent_first_seq, parent_last_seq, superseded_first_seq,
                            superseded_last_seq, first_changed_day, merged_by)
VALUES (%(fork_session_id)s, %(parent_session_id)s, %(user_id)s, %(mode)s, %(fork_seq)s, %(fork_first_seq)s,
        %(fork_last_seq)s, %(parent_first_seq)s, %(parent_last_seq)s, %(superseded_first_seq)s,
        %(superseded_last_seq)s, %(first_changed_day)s, %(merged_by)s)
RETURNING id, merged_at;

-- name: set_aside_messages
-- A replace merge's superseded parent turns: copied aside with the merge, then removed.
WITH moved AS (
    INSERT INTO superseded_messages
    SELECT m.*, %(merge_id)s::bigint FROM messages m
    WHERE m.session_id = %(session_id)s AND m.seq BETWEEN %(first)s AND %(last)s
    RETURNING session_id, seq
)
DELETE FROM messages m USING moved WHERE m.session_id = moved.session_id AND m.seq = moved.seq;

-- name: delete_session_messages
-- The parent turns a merge wrote, when it is restored.
DELETE FROM messages WHERE session_id = %(session_id)s AND seq BETWEEN %(first)s AND %(last)s;

-- name: bring_back_messages
-- A restored replace merge's superseded turns back into the archive.
WITH back AS (DELETE FROM superseded_messages WHERE merge_id = %(merge_id)s RETURNING *)
INSERT INTO messages (session_id, seq, user_id, agent_id, role, content, ts, tool_name, tool_args, tool_call_id,
                      metadata, content_hash, source_file, source_line, ingested_run_id, ingested_at)
SELECT session_id, seq, user_id, agent_id, role, content, ts, tool_name, tool_args, tool_call_id,
       metadata, content_hash, source_file, source_line, ingested_run_id, ingested_at
FROM back;

-- name: mark_merge_restored
UPDATE session_merges SET restored_by = %(restored_by)s, restored_at = now() WHERE id = %(merge_id)s;

-- name: clear_turns_from
-- What a merge changes leaves the search index at once: the session's turns from a seq on.
DELETE FROM memory_turns WHERE session_id = %(session_id)s AND seq >= %(from_seq)s;

-- name: clear_chunks_from_day
-- Chunks are what left the context as of a day's end: those of the changed day on are packed again.
DELETE FROM memory_chunks WHERE session_id = %(session_id)s AND (partition_key >= %(day)s OR end_seq >= %(from_seq)s);

-- name: clear_segments_from_day
DELETE FROM conversation_segments WHERE session_id = %(session_id)s AND (partition_key >= %(day)s OR end_seq >= %(from_seq)s);

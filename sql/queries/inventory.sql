-- What is stored, per user and per session: `memory-pipelines users` and `sessions`.

-- name: stored_users
SELECT s.user_id, count(*) AS sessions, sum(s.message_count) AS messages, min(s.first_message_at) AS first_message_at,
       max(s.last_active) AS last_active,
       (SELECT count(*) FROM memory_facts f WHERE f.user_id = s.user_id AND f.merged_into IS NULL) AS facts,
       (SELECT count(*) FROM knowledge_entries e WHERE e.user_id = s.user_id) AS entries,
       (SELECT count(*) FROM memory_chunks c WHERE c.user_id = s.user_id) AS chunks,
       (SELECT count(*) FROM memory_archive a WHERE a.user_id = s.user_id) AS archived
FROM sessions s
GROUP BY s.user_id
ORDER BY s.user_id;

-- name: user_sessions
SELECT s.session_id, s.agent_id, s.first_message_at, s.last_active, s.message_count,
       (SELECT count(*) FROM memory_chunks c WHERE c.session_id = s.session_id) AS chunks,
       sm.version AS summary_version, st.extracted_through
FROM sessions s
LEFT JOIN session_summaries sm ON sm.session_id = s.session_id
LEFT JOIN session_memory_state st ON st.session_id = s.session_id
WHERE s.user_id = %(user_id)s
ORDER BY s.first_message_at, s.session_id;

-- name: user_known
-- Whether anything is stored for the user: sessions, facts or knowledge entries.
SELECT EXISTS (SELECT 1 FROM sessions WHERE user_id = %(user_id)s)
    OR EXISTS (SELECT 1 FROM memory_facts WHERE user_id = %(user_id)s)
    OR EXISTS (SELECT 1 FROM knowledge_entries WHERE user_id = %(user_id)s);

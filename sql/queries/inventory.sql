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
-- A user's sessions, each with its fork point (NULL: a mainline session) or, for a
-- subagent's session, the session that launched it and the turn that made the call (the
-- assistant turn whose tool call the result naming the subagent answers); forks made by
-- `fork` that have no turns of their own yet are listed too.
SELECT s.session_id, s.agent_id, s.first_message_at, s.last_active, s.message_count,
       (SELECT count(*) FROM memory_chunks c WHERE c.session_id = s.session_id) AS chunks,
       sm.version AS summary_version, st.extracted_through, f.parent_session_id, f.fork_seq,
       sc.launched_by, launch.seq AS launched_at
FROM sessions s
LEFT JOIN session_summaries sm ON sm.session_id = s.session_id
LEFT JOIN session_memory_state st ON st.session_id = s.session_id
LEFT JOIN session_forks f ON f.session_id = s.session_id
LEFT JOIN LATERAL (
    SELECT m.metadata -> 'sidechain_of' ->> 'session_id' AS launched_by, m.metadata -> 'sidechain_of' ->> 'agent_id' AS agent
    FROM messages m WHERE m.session_id = s.session_id AND m.metadata ? 'sidechain_of' ORDER BY m.seq LIMIT 1
) sc ON true
LEFT JOIN LATERAL (
    SELECT c.seq
    FROM messages r
    JOIN messages c ON c.session_id = r.session_id AND c.role = 'assistant' AND c.seq < r.seq
     AND (c.tool_call_id = r.tool_call_id
          OR c.metadata -> 'tool_uses' @> jsonb_build_array(jsonb_build_object('id', r.tool_call_id)))
    WHERE r.session_id = sc.launched_by AND r.metadata ->> 'launched_agent' = sc.agent
    ORDER BY c.seq DESC LIMIT 1
) launch ON true
WHERE s.user_id = %(user_id)s
UNION ALL
SELECT f.session_id, NULL, NULL, NULL, 0, 0, NULL, NULL, f.parent_session_id, f.fork_seq, NULL, NULL
FROM session_forks f
WHERE f.user_id = %(user_id)s AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = f.session_id)
ORDER BY 3 NULLS LAST, 1;

-- name: user_known
-- Whether anything is stored for the user: sessions, facts or knowledge entries.
SELECT EXISTS (SELECT 1 FROM sessions WHERE user_id = %(user_id)s)
    OR EXISTS (SELECT 1 FROM memory_facts WHERE user_id = %(user_id)s)
    OR EXISTS (SELECT 1 FROM knowledge_entries WHERE user_id = %(user_id)s);

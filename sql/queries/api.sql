-- Serving memory to agents: keys and idempotent writes (memory_pipelines.api).

-- name: insert_api_key
INSERT INTO api_keys (name, user_id, admin, key_hash, prefix)
VALUES (%(name)s, %(user_id)s, %(admin)s, %(key_hash)s, %(prefix)s)
RETURNING id, name, user_id, admin, prefix, created_at, last_used_at, revoked_at;

-- name: api_key_by_hash
-- The live key a request presents. Its last use is noted to the minute: a busy key is not
-- a row every request of it writes (and waits) on.
WITH live AS (
    SELECT id, name, user_id, admin, prefix, created_at, last_used_at, revoked_at FROM api_keys
    WHERE key_hash = %(key_hash)s AND revoked_at IS NULL
), touched AS (
    UPDATE api_keys k SET last_used_at = now() FROM live
    WHERE k.id = live.id AND (live.last_used_at IS NULL OR live.last_used_at < now() - interval '1 minute')
)
SELECT * FROM live;

-- name: api_keys
SELECT id, name, user_id, admin, prefix, created_at, last_used_at, revoked_at FROM api_keys ORDER BY id;

-- name: revoke_api_key
UPDATE api_keys SET revoked_at = now() WHERE id = %(id)s AND revoked_at IS NULL
RETURNING id, name, user_id, admin, prefix, created_at, last_used_at, revoked_at;

-- name: claim_idempotency_key
-- Taken first in a write's transaction: a concurrent retry waits here, then finds the answer.
INSERT INTO api_requests (key_id, idempotency_key, operation, request_hash, response)
VALUES (%(key_id)s, %(idempotency_key)s, %(operation)s, %(request_hash)s, '{}'::jsonb)
ON CONFLICT (key_id, idempotency_key) DO NOTHING;

-- name: idempotent_answer
SELECT operation, request_hash, response FROM api_requests
WHERE key_id = %(key_id)s AND idempotency_key = %(idempotency_key)s;

-- name: record_idempotent_answer
UPDATE api_requests SET response = %(response)s
WHERE key_id = %(key_id)s AND idempotency_key = %(idempotency_key)s;

-- name: set_statement_timeout
-- Every API request's transaction: a slow question ends with an error, not a hung worker.
SELECT set_config('statement_timeout', %(ms)s, true);

-- name: user_memory_summary
SELECT content, fact_count, updated_at FROM memory_summary WHERE user_id = %(user_id)s;

-- Serving memory to agents (memory_pipelines.api): API keys, and the answers to writes that
-- carried an Idempotency-Key, so a retried request does not write twice.
CREATE TABLE IF NOT EXISTS api_keys (
    id           bigserial   PRIMARY KEY,
    name         text,
    user_id      text,                  -- whose memory the key reads and writes; NULL for an admin key
    admin        boolean     NOT NULL DEFAULT false,
    key_hash     text        NOT NULL UNIQUE,  -- sha256 of the key: the key itself is never stored
    prefix       text        NOT NULL,         -- its first characters, to tell keys apart in a list
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz,
    CHECK (admin OR user_id IS NOT NULL)
);

CREATE TABLE IF NOT EXISTS api_requests (
    key_id          bigint      NOT NULL REFERENCES api_keys (id),
    idempotency_key text        NOT NULL,
    operation       text        NOT NULL,
    request_hash    text        NOT NULL,  -- a retry must send the same request
    response        jsonb       NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (key_id, idempotency_key)
);

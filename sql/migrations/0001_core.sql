-- The transcript archive: every valid message ever ingested, plus what was refused.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE IF NOT EXISTS messages (
    session_id      text        NOT NULL,
    seq             bigint      NOT NULL CHECK (seq >= 0),
    user_id         text        NOT NULL,
    agent_id        text,
    role            text        NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'system')),
    content         text        NOT NULL,
    ts              timestamptz NOT NULL,
    tool_name       text,
    tool_args       jsonb,
    tool_call_id    text,
    metadata        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- sha256 of every field above but the key: tells a re-sent message from a conflicting one
    content_hash    text        NOT NULL,
    source_file     text        NOT NULL,
    source_line     bigint      NOT NULL,
    ingested_run_id text        NOT NULL,
    ingested_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, seq)
);
CREATE INDEX IF NOT EXISTS messages_ts_idx ON messages (ts);
CREATE INDEX IF NOT EXISTS messages_user_ts_idx ON messages (user_id, ts);

CREATE TABLE IF NOT EXISTS sessions (
    session_id       text        PRIMARY KEY,
    user_id          text        NOT NULL,
    agent_id         text,
    first_message_at timestamptz NOT NULL,
    last_active      timestamptz NOT NULL,
    message_count    bigint      NOT NULL CHECK (message_count > 0)
);
CREATE INDEX IF NOT EXISTS sessions_user_idx ON sessions (user_id, last_active DESC);

CREATE TABLE IF NOT EXISTS quarantine (
    id             bigserial   PRIMARY KEY,
    source_file    text        NOT NULL,
    source_line    bigint      NOT NULL,
    reason         text        NOT NULL,
    detail         text        NOT NULL,
    -- the offending record, cut to 4,000 characters; raw_bytes is its full size
    raw            text        NOT NULL,
    raw_bytes      bigint      NOT NULL,
    session_id     text,
    seq            bigint,
    partition_key  text        NOT NULL,
    run_id         text        NOT NULL,
    quarantined_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source_file, source_line, reason)
);
CREATE INDEX IF NOT EXISTS quarantine_reason_idx ON quarantine (reason);

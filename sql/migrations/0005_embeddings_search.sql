-- Embeddings on the embedded tables, session sketches, the recall ledger, archive full text.

ALTER TABLE memory_facts ADD COLUMN IF NOT EXISTS embedding vector;
ALTER TABLE memory_facts ADD COLUMN IF NOT EXISTS embedding_model text;
-- kept inline: a vector in TOAST costs several buffer reads per row in an exact scan
ALTER TABLE memory_facts ALTER COLUMN embedding SET STORAGE PLAIN;
CREATE INDEX IF NOT EXISTS memory_facts_embedding_model_idx ON memory_facts (user_id, embedding_model);

ALTER TABLE memory_chunks ADD COLUMN IF NOT EXISTS embedding vector;
ALTER TABLE memory_chunks ADD COLUMN IF NOT EXISTS embedding_model text;
ALTER TABLE memory_chunks ALTER COLUMN embedding SET STORAGE PLAIN;
CREATE INDEX IF NOT EXISTS memory_chunks_embedding_model_idx ON memory_chunks (user_id, embedding_model);

-- A session's working notes (scratchpad), updated in place; scope 'user' notes follow the
-- user into every session.
CREATE TABLE IF NOT EXISTS sketches (
    id            bigserial   PRIMARY KEY,
    user_id       text        NOT NULL,
    scope         text        NOT NULL CHECK (scope IN ('session', 'user')),
    session_id    text        NOT NULL,  -- the session that wrote it last
    scope_key     text        NOT NULL,  -- session_id for scope 'session', '' for scope 'user'
    section       text        NOT NULL,
    key           text        NOT NULL,
    value         text        NOT NULL,
    updated_at    timestamptz NOT NULL,  -- conversation time of the write: the newest wins
    source        text        NOT NULL CHECK (source IN ('transcript', 'api')),
    source_seq    bigint,
    partition_key text,
    run_id        text        NOT NULL,
    UNIQUE (user_id, scope, scope_key, section, key)
);
CREATE INDEX IF NOT EXISTS sketches_user_idx ON sketches (user_id, updated_at DESC);

-- Raw excerpts already recalled into a session (the last 100 are kept).
CREATE TABLE IF NOT EXISTS recall_ledger (
    session_id   text        NOT NULL,
    chunk_id     bigint      NOT NULL,
    delivered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (session_id, chunk_id)
);

-- Keyword search covers the whole archive, not only chunks.
CREATE INDEX IF NOT EXISTS messages_fts_idx ON messages USING gin (to_tsvector('simple', content));

-- Extracted facts with dedupe/merge, per-user summaries, extraction state, raw chunks.

CREATE TABLE IF NOT EXISTS memory_facts (
    id               bigserial   PRIMARY KEY,
    user_id          text        NOT NULL,
    category         text        NOT NULL,
    key              text        NOT NULL,
    canonical_key    text        NOT NULL,  -- spelling-insensitive key: rows sharing it are one fact
    value            text        NOT NULL,
    source           text        NOT NULL CHECK (source IN ('conversation', 'tool_call', 'auto_discovery', 'user_explicit')),
    confidence       smallint    NOT NULL CHECK (confidence BETWEEN 0 AND 100),
    expires_at       timestamptz,
    -- conversation time the current value was last seen; event time wins: an older
    -- observation never overwrites a newer one
    last_verified_at timestamptz NOT NULL,
    source_context   text,
    -- a re-spelled key: this row is hidden behind the survivor; SET merged_into = NULL undoes it
    merged_into      bigint      REFERENCES memory_facts (id),
    -- lineage: where the value was observed and what produced it
    session_id       text        NOT NULL,
    seq_start        bigint      NOT NULL,
    seq_end          bigint      NOT NULL,
    partition_key    text        NOT NULL,
    run_id           text        NOT NULL,
    model            text        NOT NULL,
    prompt_version   text        NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, category, key),
    CHECK (merged_into IS NULL OR merged_into <> id),
    CHECK (seq_end >= seq_start)
);
CREATE INDEX IF NOT EXISTS memory_facts_visible_idx ON memory_facts (user_id, category) WHERE merged_into IS NULL;
CREATE INDEX IF NOT EXISTS memory_facts_merged_idx ON memory_facts (merged_into) WHERE merged_into IS NOT NULL;
CREATE INDEX IF NOT EXISTS memory_facts_session_idx ON memory_facts (session_id);
CREATE INDEX IF NOT EXISTS memory_facts_family_idx ON memory_facts (user_id, category, canonical_key);

-- Items a model returned that failed validation: dropped from the facts, kept for audit.
CREATE TABLE IF NOT EXISTS memory_fact_rejections (
    id            bigserial   PRIMARY KEY,
    user_id       text        NOT NULL,
    session_id    text        NOT NULL,
    item          jsonb       NOT NULL,
    reason        text        NOT NULL,
    partition_key text        NOT NULL,
    run_id        text        NOT NULL,
    model         text        NOT NULL,
    prompt_version text       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, item, reason)
);

CREATE TABLE IF NOT EXISTS memory_summary (
    user_id        text        PRIMARY KEY,
    content        text        NOT NULL,
    fact_count     integer     NOT NULL,
    facts_hash     text        NOT NULL,  -- the facts it was written from: unchanged facts, no rewrite
    model          text        NOT NULL,
    prompt_version text        NOT NULL,
    run_id         text        NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS session_memory_state (
    session_id        text        PRIMARY KEY,
    user_id           text        NOT NULL,
    extracted_through timestamptz NOT NULL,  -- the last activity the extraction covered
    extracted_seq     bigint      NOT NULL,
    extracted_at      timestamptz NOT NULL,  -- the end of the window it ran for (deterministic)
    facts_accepted    integer     NOT NULL,
    facts_rejected    integer     NOT NULL,
    partition_key     text        NOT NULL,
    run_id            text        NOT NULL
);

-- Verbatim messages that left the context window, append-only.
CREATE TABLE IF NOT EXISTS memory_chunks (
    id              bigserial   PRIMARY KEY,
    user_id         text        NOT NULL,
    session_id      text        NOT NULL,
    start_seq       bigint      NOT NULL,
    end_seq         bigint      NOT NULL,
    started_at      timestamptz NOT NULL,
    ended_at        timestamptz NOT NULL,
    content         text        NOT NULL,
    content_hash    text        NOT NULL,
    breadcrumbs     text[]      NOT NULL DEFAULT '{}',
    message_count   integer     NOT NULL,
    summary_version integer,               -- the session summary whose keys joined the breadcrumbs
    partition_key   text        NOT NULL,
    run_id          text        NOT NULL,
    model           text        NOT NULL,
    prompt_version  text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (session_id, content_hash),
    CHECK (end_seq >= start_seq)
);
CREATE INDEX IF NOT EXISTS memory_chunks_recent_idx ON memory_chunks (user_id, session_id, ended_at DESC);
CREATE INDEX IF NOT EXISTS memory_chunks_fts_idx ON memory_chunks USING gin (to_tsvector('simple', content));
CREATE INDEX IF NOT EXISTS memory_chunks_breadcrumbs_idx ON memory_chunks USING gin (breadcrumbs);

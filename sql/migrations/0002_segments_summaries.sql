-- Model calls, filtered segments and rolling summaries with cursors.

CREATE TABLE IF NOT EXISTS llm_calls (
    id               bigserial   PRIMARY KEY,
    run_id           text        NOT NULL,
    asset            text        NOT NULL,
    partition_key    text,
    session_id       text,
    purpose          text        NOT NULL,
    backend          text        NOT NULL,
    model            text        NOT NULL,
    prompt_version   text        NOT NULL,
    input_tokens     integer     NOT NULL,
    output_tokens    integer     NOT NULL,
    tokens_estimated boolean     NOT NULL,
    latency_ms       real        NOT NULL,
    attempts         integer     NOT NULL DEFAULT 1,
    status           text        NOT NULL CHECK (status IN ('ok', 'error', 'unparsable')),
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS llm_calls_run_idx ON llm_calls (run_id);
CREATE INDEX IF NOT EXISTS llm_calls_session_idx ON llm_calls (session_id, purpose);

CREATE TABLE IF NOT EXISTS conversation_segments (
    segment_id     text        PRIMARY KEY,  -- session_id:start_seq
    session_id     text        NOT NULL,
    user_id        text        NOT NULL,
    partition_key  text        NOT NULL,     -- the UTC day of the window the segment was cut from
    start_seq      bigint      NOT NULL,
    end_seq        bigint      NOT NULL,
    started_at     timestamptz NOT NULL,
    ended_at       timestamptz NOT NULL,
    message_count  integer     NOT NULL,
    chars          integer     NOT NULL,
    is_noise       boolean     NOT NULL,
    noise_reason   text,
    confidence     real        NOT NULL CHECK (confidence BETWEEN 0 AND 1),
    dropped        boolean     NOT NULL,     -- noise with confidence >= 0.7: excluded downstream
    judge_status   text        NOT NULL CHECK (judge_status IN ('ok', 'failed')),
    judge_error    text,
    judge_backend  text        NOT NULL,
    judge_model    text        NOT NULL,
    prompt_version text        NOT NULL,
    fingerprint    text        NOT NULL,     -- inputs of the judgement: same fingerprint, same verdict
    run_id         text        NOT NULL,
    CHECK (end_seq >= start_seq),
    CHECK (NOT dropped OR is_noise)
);
CREATE INDEX IF NOT EXISTS conversation_segments_session_idx ON conversation_segments (session_id, start_seq);
CREATE INDEX IF NOT EXISTS conversation_segments_partition_idx ON conversation_segments (partition_key);

-- Every version of every session's summary, in the order it was built.
CREATE TABLE IF NOT EXISTS session_summary_versions (
    session_id     text        NOT NULL,
    version        integer     NOT NULL,
    user_id        text        NOT NULL,
    partition_key  text        NOT NULL,
    step           integer     NOT NULL,     -- 0: no model call (cursor-only or trim), 1..n: chunk number
    step_count     integer     NOT NULL,     -- steps the day needs; the day is complete at step = step_count
    kind           text        NOT NULL CHECK (kind IN ('chunk', 'trim', 'cursor_only')),
    summary        jsonb       NOT NULL,
    cursor_ts      timestamptz NOT NULL,
    cursor_seq     bigint      NOT NULL,
    first_seq      bigint,
    last_seq       bigint,
    messages_in    integer     NOT NULL,
    trimmed        jsonb       NOT NULL DEFAULT '[]'::jsonb,  -- entries the decision step removed
    backend        text        NOT NULL,
    model          text        NOT NULL,
    prompt_version text        NOT NULL,
    fingerprint    text        NOT NULL,
    run_id         text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, version),
    UNIQUE (session_id, partition_key, step)
);

-- The current summary and cursor of each session (its latest version).
CREATE TABLE IF NOT EXISTS session_summaries (
    session_id     text        PRIMARY KEY,
    user_id        text        NOT NULL,
    summary        jsonb       NOT NULL,
    cursor_ts      timestamptz,              -- NULL: a summary imported without a cursor
    cursor_seq     bigint,
    version        integer,
    partition_key  text,
    run_id         text,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS session_summaries_user_idx ON session_summaries (user_id);

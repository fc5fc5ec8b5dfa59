-- Forked sessions and their merges (memory_pipelines.forks). A fork's timeline is its
-- parent's turns up to fork_seq followed by its own (seq > fork_seq); the shared turns stay
-- the parent's rows only.
CREATE TABLE IF NOT EXISTS session_forks (
    session_id        text        PRIMARY KEY,
    parent_session_id text        NOT NULL,
    fork_seq          bigint      NOT NULL CHECK (fork_seq >= 0),  -- the last parent turn it shares
    user_id           text        NOT NULL,
    created_by        text        NOT NULL,  -- 'transcript' (declared by its records) or who ran `fork`
    created_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (parent_session_id <> session_id)
);
CREATE INDEX IF NOT EXISTS session_forks_parent_idx ON session_forks (parent_session_id);
CREATE INDEX IF NOT EXISTS session_forks_user_idx ON session_forks (user_id);

-- Every merge of a fork into its parent: who, when, how, and which turns it wrote or set aside.
CREATE TABLE IF NOT EXISTS session_merges (
    id                   bigserial   PRIMARY KEY,
    fork_session_id      text        NOT NULL,
    parent_session_id    text        NOT NULL,
    user_id              text        NOT NULL,
    mode                 text        NOT NULL CHECK (mode IN ('append', 'replace', 'summarize')),
    fork_seq             bigint      NOT NULL,
    fork_first_seq       bigint      NOT NULL,  -- the fork's own turns merged
    fork_last_seq        bigint      NOT NULL,
    parent_first_seq     bigint      NOT NULL,  -- the parent turns the merge wrote
    parent_last_seq      bigint      NOT NULL,
    superseded_first_seq bigint,                -- replace: the parent turns set aside
    superseded_last_seq  bigint,
    first_changed_day    text        NOT NULL,  -- the day the parent is distilled again from
    merged_by            text        NOT NULL,
    merged_at            timestamptz NOT NULL DEFAULT now(),
    restored_by          text,
    restored_at          timestamptz,
    CHECK (fork_last_seq >= fork_first_seq AND parent_last_seq >= parent_first_seq)
);
-- merging a fork into its parent twice does nothing: one merge in force per pair
CREATE UNIQUE INDEX IF NOT EXISTS session_merges_in_force_idx
    ON session_merges (fork_session_id, parent_session_id) WHERE restored_at IS NULL;

-- Parent turns a replace merge set aside: out of distillation and search, restorable with
-- the merge. Same columns as messages, and the merge that set them aside.
CREATE TABLE IF NOT EXISTS superseded_messages (
    LIKE messages INCLUDING DEFAULTS,
    merge_id bigint NOT NULL REFERENCES session_merges (id),
    PRIMARY KEY (merge_id, session_id, seq)
);
CREATE INDEX IF NOT EXISTS superseded_messages_session_idx ON superseded_messages (session_id, seq);

-- Knowledge entries with versions, the entity graph, error memory, decay archival, forgetting.

CREATE TABLE IF NOT EXISTS knowledge_entries (
    id               bigserial   PRIMARY KEY,
    entry_key        text        NOT NULL UNIQUE,  -- sha256(kind, title, scope, scope_id): content-addressed
    user_id          text,                        -- the owner; NULL for a global entry
    kind             text        NOT NULL CHECK (kind IN ('fact', 'event', 'instruction', 'insight', 'user', 'project')),
    title            text        NOT NULL,
    content          text        NOT NULL,
    tags             text[]      NOT NULL DEFAULT '{}',
    confidence       real        NOT NULL CHECK (confidence BETWEEN 0 AND 1),
    importance       real        NOT NULL CHECK (importance BETWEEN 0 AND 1),
    scope            text        NOT NULL CHECK (scope IN ('entity', 'process', 'session', 'global')),
    scope_id         text,                        -- the user, process or session of the scope
    consent_basis    text        NOT NULL DEFAULT 'not_set' CHECK (consent_basis IN (
                         'legitimate_interest', 'consent', 'legal_obligation', 'vital_interest', 'public_task', 'not_set')),
    has_pii          boolean     NOT NULL DEFAULT false,
    pii_kinds        text[]      NOT NULL DEFAULT '{}',
    valid_from       timestamptz NOT NULL,
    valid_until      timestamptz,
    version          integer     NOT NULL DEFAULT 1,
    created_at       timestamptz NOT NULL,        -- conversation time of the first observation
    updated_at       timestamptz NOT NULL,        -- conversation time of the current content
    access_count     integer     NOT NULL DEFAULT 0,
    last_accessed_at timestamptz,
    session_id       text        NOT NULL,
    seq_start        bigint      NOT NULL,
    seq_end          bigint      NOT NULL,
    partition_key    text        NOT NULL,
    run_id           text        NOT NULL,
    model            text        NOT NULL,
    prompt_version   text        NOT NULL,
    embedding        vector,
    embedding_model  text,
    search_tsv       tsvector
);
ALTER TABLE knowledge_entries ALTER COLUMN embedding SET STORAGE PLAIN;
CREATE INDEX IF NOT EXISTS knowledge_entries_scope_idx ON knowledge_entries (scope, scope_id);
CREATE INDEX IF NOT EXISTS knowledge_entries_user_idx ON knowledge_entries (user_id, kind);
CREATE INDEX IF NOT EXISTS knowledge_entries_tsv_idx ON knowledge_entries USING gin (search_tsv);

-- Full text kept in sync by a trigger (array_to_string is not immutable: no generated column).
CREATE OR REPLACE FUNCTION knowledge_entries_tsv() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.search_tsv := to_tsvector('simple', NEW.title || ' ' || NEW.content || ' ' || array_to_string(NEW.tags, ' '));
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS knowledge_entries_tsv ON knowledge_entries;
CREATE TRIGGER knowledge_entries_tsv BEFORE INSERT OR UPDATE OF title, content, tags ON knowledge_entries
FOR EACH ROW EXECUTE FUNCTION knowledge_entries_tsv();

-- Every content an entry has had; version numbers follow conversation time.
CREATE TABLE IF NOT EXISTS knowledge_entry_versions (
    entry_key      text        NOT NULL,
    content_hash   text        NOT NULL,
    user_id        text,
    title          text        NOT NULL,
    content        text        NOT NULL,
    tags           text[]      NOT NULL,
    confidence     real        NOT NULL,
    observed_at    timestamptz NOT NULL,
    session_id     text        NOT NULL,
    seq_start      bigint      NOT NULL,
    seq_end        bigint      NOT NULL,
    partition_key  text        NOT NULL,
    run_id         text        NOT NULL,
    PRIMARY KEY (entry_key, content_hash)
);

-- What each session-day's synthesis read: the same inputs again are not synthesized again.
CREATE TABLE IF NOT EXISTS knowledge_sources (
    session_id    text        NOT NULL,
    partition_key text        NOT NULL,
    fingerprint   text        NOT NULL,
    entries       integer     NOT NULL,
    run_id        text        NOT NULL,
    PRIMARY KEY (session_id, partition_key)
);

CREATE TABLE IF NOT EXISTS entity_graph (
    id             bigserial   PRIMARY KEY,
    user_id        text        NOT NULL,
    subject        text        NOT NULL,
    relation       text        NOT NULL,
    object         text        NOT NULL,
    confidence     real        NOT NULL CHECK (confidence BETWEEN 0 AND 1),
    valid_from     timestamptz NOT NULL,
    valid_until    timestamptz,               -- closed by a newer contradicting triple, never deleted
    closed_by      bigint,
    session_id     text        NOT NULL,
    seq_start      bigint      NOT NULL,
    seq_end        bigint      NOT NULL,
    partition_key  text        NOT NULL,
    run_id         text        NOT NULL,
    model          text        NOT NULL,
    prompt_version text        NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, subject, relation, object, valid_from)
);
CREATE INDEX IF NOT EXISTS entity_graph_subject_idx ON entity_graph (user_id, lower(subject));
CREATE INDEX IF NOT EXISTS entity_graph_object_idx ON entity_graph (user_id, lower(object));

CREATE TABLE IF NOT EXISTS error_memory (
    id            bigserial   PRIMARY KEY,
    user_id       text        NOT NULL,
    tool          text        NOT NULL,
    error         text        NOT NULL,
    fix           text        NOT NULL,
    error_hash    text        NOT NULL,
    session_id    text        NOT NULL,
    error_seq     bigint      NOT NULL,
    fix_seq       bigint      NOT NULL,
    observed_at   timestamptz NOT NULL,
    expires_at    timestamptz NOT NULL,      -- 90 days after it was seen, renewed when a search hits it
    hit_count     integer     NOT NULL DEFAULT 0,
    partition_key text        NOT NULL,
    run_id        text        NOT NULL,
    UNIQUE (user_id, tool, error_hash)
);

ALTER TABLE memory_facts ADD COLUMN IF NOT EXISTS access_count integer NOT NULL DEFAULT 0;
ALTER TABLE memory_facts ADD COLUMN IF NOT EXISTS last_accessed_at timestamptz;

-- What decay, expiry and retention moved out: kept for audit, out of every search, restorable.
CREATE TABLE IF NOT EXISTS memory_archive (
    id            bigserial   PRIMARY KEY,
    source_table  text        NOT NULL,
    source_id     bigint      NOT NULL,
    source_key    text,
    user_id       text,
    session_id    text,
    reason        text        NOT NULL CHECK (reason IN ('decayed', 'expired', 'ttl', 'pii_retention', 'merged_with')),
    score         real,
    as_of         timestamptz NOT NULL,
    row_data      jsonb       NOT NULL,
    partition_key text        NOT NULL,
    run_id        text        NOT NULL,
    archived_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (source_table, source_id)
);
CREATE INDEX IF NOT EXISTS memory_archive_user_idx ON memory_archive (user_id, source_table);

-- Users and sessions forgotten on request: ingestion skips their records from then on.
CREATE TABLE IF NOT EXISTS forgotten (
    user_id      text        NOT NULL,
    session_id   text        NOT NULL DEFAULT '',  -- '' : the whole user
    forgotten_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, session_id)
);

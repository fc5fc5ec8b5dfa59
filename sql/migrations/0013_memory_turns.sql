-- The turn-level index search serves passages from: every user, assistant and tool message
-- of the archive is a unit, with its language's stemmed lexemes (positions kept: BM25 needs
-- each term's frequency) and an embedding of the turn read with its neighbours.
CREATE TABLE IF NOT EXISTS memory_turns (
    id              bigserial   UNIQUE,
    session_id      text        NOT NULL,
    seq             bigint      NOT NULL,
    user_id         text        NOT NULL,
    pos             integer     NOT NULL,  -- order among the session's turns: neighbours are pos - 1 and pos + 1
    role            text        NOT NULL CHECK (role IN ('user', 'assistant', 'tool')),
    ts              timestamptz NOT NULL,
    -- the text search configuration of the session's language (a name: reg* types in user
    -- tables would block pg_upgrade)
    language        text        NOT NULL,
    body            text        NOT NULL,  -- what the turn says (a tool result capped)
    keys            text[]      NOT NULL DEFAULT '{}',  -- breadcrumbs and summary keys found in it
    -- body lexemes weight A, keys weight B, and the owner's lexeme (memory_turn_tsv)
    tsv             tsvector    NOT NULL,
    body_length     integer     NOT NULL,  -- the body's lexeme occurrences: BM25's document length
    content_hash    text        NOT NULL,  -- of what the row holds besides its embedding
    window_hash     text        NOT NULL,  -- of the text embedded: the turn and its neighbours
    embedding       halfvec,
    embedding_model text,
    partition_key   text        NOT NULL,
    run_id          text        NOT NULL,
    PRIMARY KEY (session_id, seq)
);
ALTER TABLE memory_turns ALTER COLUMN embedding SET STORAGE PLAIN;
CREATE INDEX IF NOT EXISTS memory_turns_user_idx ON memory_turns (user_id, session_id, pos);
CREATE INDEX IF NOT EXISTS memory_turns_tsv_idx ON memory_turns USING gin (tsv);
CREATE INDEX IF NOT EXISTS memory_turns_embedding_model_idx ON memory_turns (user_id, embedding_model);

-- BM25's corpus statistics per user (and language: a query is stemmed in each of the
-- user's): how many turns, and their lengths summed.
CREATE TABLE IF NOT EXISTS memory_turn_stats (
    user_id      text   NOT NULL,
    language     text   NOT NULL,
    turns        bigint NOT NULL,
    total_length bigint NOT NULL,
    PRIMARY KEY (user_id, language)
);

-- The words a turn is indexed by, and a query is searched by: paths, URLs, hosts, e-mail
-- addresses and dotted names split into their parts, which the parser would keep whole
-- (`pd.read_csv` -> `pd`, `read`, `csv`; `config.toml` -> `config`, `toml`).
CREATE OR REPLACE FUNCTION memory_turn_words(body text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT translate(body, './@:', '    ') $$;

-- A text's lexemes in a text search configuration (named: the turn's language), with positions.
CREATE OR REPLACE FUNCTION memory_turn_lexemes(language text, body text) RETURNS tsvector
    LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT to_tsvector(language::regconfig, memory_turn_words(body)) $$;

-- The lexeme every turn of a user holds: a search ANDs it with the query, so the full-text
-- index itself keeps to the user's turns (without it, a common word's matches over every
-- user's turns were read and then filtered: 40 ms at 2M turns).
CREATE OR REPLACE FUNCTION memory_turn_owner(user_id text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT '~' || md5(user_id) $$;

-- What a turn is indexed by: its body's lexemes (weight A), its keys' (weight B), its owner.
CREATE OR REPLACE FUNCTION memory_turn_tsv(language text, body text, keys text[], user_id text) RETURNS tsvector
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT setweight(memory_turn_lexemes(language, body), 'A')
        || setweight(memory_turn_lexemes(language, array_to_string(keys, ' ')), 'B')
        || array_to_tsvector(ARRAY[memory_turn_owner(user_id)]) $$;

-- BM25's document length: how many lexeme occurrences the body has.
CREATE OR REPLACE FUNCTION memory_turn_length(language text, body text) RETURNS integer
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(array_length(positions, 1)), 0)::integer FROM unnest(memory_turn_lexemes(language, body)) $$;

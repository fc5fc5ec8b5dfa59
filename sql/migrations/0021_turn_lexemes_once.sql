-- A turn's body lexemes are computed once when it is written (issue 15): its index vector
-- and BM25's length both follow from them (computing them twice was a tenth of writing
-- memory_turns). memory_turn_tsv and memory_turn_length keep their meaning.
CREATE OR REPLACE FUNCTION memory_turn_tsv_of(lexemes tsvector, language text, keys text[], user_id text)
    RETURNS tsvector LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT setweight(lexemes, 'A')
        || setweight(memory_turn_lexemes(language, array_to_string(keys, ' ')), 'B')
        || array_to_tsvector(ARRAY[memory_turn_owner(user_id)]) $$;

CREATE OR REPLACE FUNCTION memory_turn_length_of(lexemes tsvector) RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(sum(array_length(positions, 1)), 0)::integer FROM unnest(lexemes) $$;

CREATE OR REPLACE FUNCTION memory_turn_tsv(language text, body text, keys text[], user_id text) RETURNS tsvector
    LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT memory_turn_tsv_of(memory_turn_lexemes(language, body), language, keys, user_id) $$;

CREATE OR REPLACE FUNCTION memory_turn_length(language text, body text) RETURNS integer
    LANGUAGE sql STABLE PARALLEL SAFE AS $$ SELECT memory_turn_length_of(memory_turn_lexemes(language, body)) $$;

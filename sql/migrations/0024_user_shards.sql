-- User shards (issue 19): a user's shard is the first 32 bits of md5(user_id) modulo the
-- shard count, as memory_pipelines.shards.shard_of computes it; with one shard every user is
-- in shard 0, and so is a row of no user (a global knowledge entry). Work-selecting queries
-- filter on it, so a shard's run touches only its users.
CREATE OR REPLACE FUNCTION memory_shard(user_id text, shards integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN shards <= 1 OR user_id IS NULL THEN 0
                ELSE (('x' || left(md5(user_id), 8))::bit(32)::bigint % shards)::integer END
$$;

-- The shard count the database is distilled with: a run with another MEMORY_SHARDS is
-- refused until `memory-pipelines reshard` has recorded the new one. One row at most.
CREATE TABLE IF NOT EXISTS shard_layout (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    shards     integer NOT NULL CHECK (shards >= 1),
    updated_at timestamptz NOT NULL DEFAULT now(),
    previous   integer
);

-- name: create_schema_migrations
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: applied_migrations
SELECT version, checksum FROM schema_migrations ORDER BY version;

-- name: record_migration
INSERT INTO schema_migrations (version, name, checksum)
VALUES (%(version)s, %(name)s, %(checksum)s);

-- name: server_facts
-- What `memory-pipelines doctor` reports of the server: its version, the extensions' versions,
-- whether pgvector has halfvec (0.7 and newer; every embedding is one), and whether the
-- migration ledger exists yet.
SELECT current_setting('server_version'),
       (SELECT extversion FROM pg_extension WHERE extname = 'vector'),
       (SELECT extversion FROM pg_extension WHERE extname = 'pg_trgm'),
       to_regtype('halfvec') IS NOT NULL,
       to_regclass('schema_migrations') IS NOT NULL;

-- name: extension_installed
SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = %(name)s);

-- name: list_tables
SELECT table_name FROM information_schema.tables
WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name <> 'schema_migrations'
ORDER BY table_name;

-- name: create_dagster_schema
-- Where Dagster's run and event storage lives when it shares the pipeline's database.
-- IF NOT EXISTS alone races: two processes starting at once both try to create it.
SELECT pg_advisory_xact_lock(hashtext('memory_pipelines.dagster_schema'));
CREATE SCHEMA IF NOT EXISTS {schema};

-- name: lock_dagster_storage
-- Held (to the transaction's end) while an instance makes Dagster's tables: two processes
-- making them at once collide ("type ... already exists").
SELECT pg_advisory_xact_lock(hashtext('memory_pipelines.dagster_storage'));

-- name: table_sizes
-- Bytes per table of the pipeline's schema, with indexes and TOAST.
SELECT c.relname, pg_total_relation_size(c.oid)
FROM pg_class c WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
ORDER BY 1;

-- name: record_shard_layout
-- The shard count of the first run is kept (a later one is compared with it).
INSERT INTO shard_layout (shards) VALUES (%(shards)s) ON CONFLICT (singleton) DO NOTHING;

-- name: shard_layout
SELECT shards FROM shard_layout;

-- name: change_shard_layout
INSERT INTO shard_layout (shards) VALUES (%(shards)s)
ON CONFLICT (singleton) DO UPDATE SET previous = shard_layout.shards, shards = EXCLUDED.shards, updated_at = now()
RETURNING previous;

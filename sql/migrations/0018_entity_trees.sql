-- Entity trees (memory_pipelines.tree.build_entity_tree): a third kind of tree in memory_tree,
-- keyed "user:entity". A leaf may have no spans (a row written through the API has no turns).
-- A node a model summarized keeps what it was written from (source_hash): unchanged inputs,
-- no new call.
ALTER TABLE memory_tree DROP CONSTRAINT IF EXISTS memory_tree_tree_kind_check;
ALTER TABLE memory_tree ADD CONSTRAINT memory_tree_tree_kind_check
    CHECK (tree_kind IN ('session', 'scene', 'entity'));
ALTER TABLE memory_tree ADD COLUMN IF NOT EXISTS source_hash text;

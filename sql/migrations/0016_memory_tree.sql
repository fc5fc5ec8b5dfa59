-- The temporal tree (memory_pipelines.tree): session trees over chunks, scene trees per
-- user over sessions by day, week and month. A node is named within its tree by node_key;
-- its children name it as parent_key. Spans are the turns it covers ([{session_id,
-- seq_start, seq_end}]): lineage to the messages.
CREATE TABLE IF NOT EXISTS memory_tree (
    id            bigserial   UNIQUE,
    user_id       text        NOT NULL,
    tree_kind     text        NOT NULL CHECK (tree_kind IN ('session', 'scene')),
    tree_key      text        NOT NULL,  -- the session's id (session trees), the user's (scene trees)
    node_key      text        NOT NULL,
    level         integer     NOT NULL CHECK (level >= 0),  -- 0: a leaf
    parent_key    text,                  -- NULL: a top node
    position      integer     NOT NULL,  -- among its parent's children
    started_at    timestamptz NOT NULL,
    ended_at      timestamptz NOT NULL,
    spans         jsonb       NOT NULL,
    keys          text[]      NOT NULL DEFAULT '{}',
    summary       text        NOT NULL,
    content_hash  text        NOT NULL,
    model         text        NOT NULL,
    partition_key text        NOT NULL,  -- the day of the node's newest turn
    run_id        text        NOT NULL,
    PRIMARY KEY (tree_kind, tree_key, node_key),
    CHECK (ended_at >= started_at)
);
CREATE INDEX IF NOT EXISTS memory_tree_user_idx ON memory_tree (user_id, tree_kind, tree_key);

-- Estimated cost per model call (from the configured price table at call time, so a later
-- price change never rewrites history; NULL: the model was not priced), and cost per user
-- and day for analysts.
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS cost_usd numeric(16, 8);

CREATE OR REPLACE VIEW model_usage_daily AS
SELECT s.user_id, c.partition_key AS day, c.backend, c.model, count(*) AS calls,
       sum(c.input_tokens) AS input_tokens, sum(c.output_tokens) AS output_tokens,
       count(*) FILTER (WHERE c.status <> 'ok') AS failed_calls,
       coalesce(sum(c.cost_usd), 0) AS estimated_cost_usd,
       count(*) FILTER (WHERE c.cost_usd IS NULL) AS unpriced_calls
FROM llm_calls c LEFT JOIN sessions s USING (session_id)
GROUP BY 1, 2, 3, 4;

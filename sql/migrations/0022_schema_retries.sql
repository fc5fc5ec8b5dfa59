-- A call whose first answer broke its prompt's JSON Schema (or was not JSON) is asked again
-- once with what was wrong (issue 16): which calls needed that, for the retry rate per purpose.
ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS schema_retried boolean NOT NULL DEFAULT false;

-- A refusal the archive has since overcome is resolved, never deleted: a later run that stores
-- the same record (the same file and line, and the same session and seq when the refusal names
-- them), or that reads a file whose latest scan under the current settings refuses none of its
-- records, marks the row with when and by which run. `memory-pipelines quarantine` and the
-- quality check list the open rows; a record refused again is open again (the same row).
ALTER TABLE quarantine ADD COLUMN IF NOT EXISTS resolved_at timestamptz;
ALTER TABLE quarantine ADD COLUMN IF NOT EXISTS resolved_by_run text;
-- what a run resolves is looked up among the open rows of the files it read
CREATE INDEX IF NOT EXISTS quarantine_open_idx ON quarantine (source_file, source_line) WHERE resolved_at IS NULL;
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'quarantine_resolved_together') THEN
        ALTER TABLE quarantine ADD CONSTRAINT quarantine_resolved_together
            CHECK ((resolved_at IS NULL) = (resolved_by_run IS NULL));
    END IF;
END
$$;

-- A refused record is one per file, position, reason and content (issue 18): a file rewritten
-- in place (a chat service's conversations.json exported again, an edited log) can put a new
-- refused record where an old one stood, and it must be quarantined too, not dropped as the
-- old row's conflict. The same record refused again on a later run still adds no row.
ALTER TABLE quarantine ADD COLUMN IF NOT EXISTS raw_md5 text GENERATED ALWAYS AS (md5(raw)) STORED;
ALTER TABLE quarantine DROP CONSTRAINT IF EXISTS quarantine_source_file_source_line_reason_key;
CREATE UNIQUE INDEX IF NOT EXISTS quarantine_record_key ON quarantine (source_file, source_line, reason, raw_md5);

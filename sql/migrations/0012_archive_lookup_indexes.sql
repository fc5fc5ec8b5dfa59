-- Every knowledge entry written asks the archive whether decay took its key, and every
-- quality check of a day reads that day's archive rows: without these indexes each of
-- them scanned the whole archive, a cost that grew with its size.
CREATE INDEX IF NOT EXISTS memory_archive_source_key_idx ON memory_archive (source_table, source_key);
CREATE INDEX IF NOT EXISTS memory_archive_partition_idx ON memory_archive (partition_key);

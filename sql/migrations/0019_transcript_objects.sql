-- What a scan of each transcript file found, so a day's run reads only the files that can
-- hold that day (issue 18): per location (a folder, a file or an s3:// prefix) and file
-- name, the state that says it changed (size, modification time, ETag), the settings it was
-- scanned with (scan_key), its format, its record counts and the UTC days (days since
-- 1970-01-01) its own times fall on. A cache: dropping a row only makes the next run scan
-- that file again; it holds no memory.
CREATE TABLE IF NOT EXISTS transcript_objects (
    location   text        NOT NULL,
    name       text        NOT NULL,
    size       bigint      NOT NULL,
    mtime_ns   bigint      NOT NULL,
    etag       text,
    scan_key   text        NOT NULL,
    format     text        NOT NULL,
    records    integer     NOT NULL,
    refused    integer     NOT NULL,
    undated    integer     NOT NULL,
    days       integer[]   NOT NULL,
    scanned_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (location, name)
);

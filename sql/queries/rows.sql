-- The temp load tables' binary COPY (memory_pipelines.db.rows.load_rows).

-- name: load_column_types
-- A temp load table's column types, in order: load_rows sends its rows in binary, each value
-- dumped as its column's type. The load tables hold integers as bigint and fractions as
-- double precision: psycopg's binary int2, int4 and float4 wrap or round a value beyond their
-- range without a word, where the statement writing the target table casts it and refuses.
SELECT atttypid::int FROM pg_attribute
WHERE attrelid = %(table)s::regclass AND attnum > 0 AND NOT attisdropped
ORDER BY attnum;

-- name: copy_load
-- A batch's rows into a temp load table (every column, in order), in binary: text COPY had
-- the client format each array and JSON value in Python, more than half its cost of a load.
COPY {table} FROM STDIN (FORMAT BINARY);

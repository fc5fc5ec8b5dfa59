"""PostgreSQL access: the embedded server, migrations, the pool, and the table reads and writes
beside their named queries (`db/<area>.py` runs those of `sql/queries/<area>.sql`)."""

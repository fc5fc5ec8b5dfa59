"""PostgreSQL access: the embedded server, migrations, the pool and the repository layer."""

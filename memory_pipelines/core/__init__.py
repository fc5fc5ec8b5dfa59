"""The pipeline's pure logic, one module per topic: no database, no Dagster. A stage in
`memory_pipelines/stages/` reads what it needs, calls these functions and writes the result."""

"""The benchmarks that run the code location's assets: `distill` (`bench distill`, `cost`,
`backfill`, and the evidence set's database for `bench retrieval`) and `ingest` (`bench
ingest`). Their figures and tables are in `memory_pipelines.bench`."""

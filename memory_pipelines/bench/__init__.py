"""Benchmarks anyone can re-run (`memory-pipelines bench …`), a module each:

- `retrieval`: recall of evidence turns at equal budgets over the labelled evidence set
  (`evidence_set`); `needles`: the needle questions over the sample (`--needles`);
- `distill`: the figures and tables of `bench distill`, `cost` and `backfill` (the runs are
  made by `assets.bench`);
- `search`: search latency and recall at scale on a synthetic database;
- `serve`: load on the project's own servers; `models`: every prompt against a model server;
- `database`: a benchmark's database of its own, made empty or built once and reused.
"""

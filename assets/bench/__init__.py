"""The benchmarks that run the code location's assets: `distill` (`bench distill`, `cost`,
`backfill`, and the evidence set's database for `bench retrieval`) and `ingest` (`bench
ingest`). Their figures and tables are in `memory_pipelines.bench`."""

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """A run reads its resources from the environment: set them for the benchmark only."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

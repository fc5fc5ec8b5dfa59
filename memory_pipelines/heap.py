"""How a process that runs the pipeline's steps has its garbage collected.

A step holds its rows as Python objects (a day's messages, turns and their dicts: hundreds of
thousands in a backfill), and CPython's cyclic collector, at its default thresholds, walks
every object it tracks each time its oldest generation fills up: the half a million the
imports left (Dagster, pandas, great-expectations) and the step's rows, again and again. In
`bench distill` those walks took a fifth of the process's CPU.

So, once per process, before its first step: what is alive then (the imports, the run's
set-up) is frozen out of the collector's walks, and a collection of the youngest generation
waits for 50,000 new objects instead of 700. Objects are still freed when their last
reference goes, and garbage cycles are still collected, a little later (the bench's peak
memory stayed within 905–1,054 MB, its runs' spread before)."""

from __future__ import annotations

import gc
from functools import cache

# new tracked objects (allocations less deallocations) before the youngest generation is
# collected; CPython's default is 700
YOUNG_GENERATION_THRESHOLD = 50_000


@cache  # once per process
def settle_heap() -> None:
    """Freeze what this process holds now and raise the youngest generation's threshold, the
    first time it is called in a process; later calls do nothing (freezing again would keep a
    step's garbage cycles forever)."""
    # no collection first: once the code location is loaded one frees a few dozen objects
    # (20, measured) in 0.2 s of CPU, and those few stay frozen instead
    gc.freeze()
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION_THRESHOLD, middle, oldest)

"""A process that runs the pipeline's steps has what it held before its first step frozen out
of the cyclic collector's walks, once (memory_pipelines/heap.py). Each case runs in a process
of its own: settling changes the whole process, the test runner's included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from memory_pipelines.config import SAMPLE_TRANSCRIPTS

REPO = Path(__file__).resolve().parents[2]

SETTLE_TWICE = """
import gc, weakref
from memory_pipelines.heap import YOUNG_GENERATION_THRESHOLD, settle_heap

class Node:
    pass

settle_heap()
first = gc.get_freeze_count()
later = [[i] for i in range(10_000)]  # made after the first call: a second must not freeze them
settle_heap()
cycle = Node()
cycle.self = cycle
dead = weakref.ref(cycle)
del cycle
gc.collect()
print(first, gc.get_freeze_count(), gc.get_threshold()[0], YOUNG_GENERATION_THRESHOLD, int(dead() is None))
"""

# one day of the sample through the transcripts asset, as a Dagster run worker would
ONE_STEP = """
import gc, sys
from pathlib import Path
from assets.ingestion import transcripts
from tests.helpers import materialize_partitions

before = gc.get_freeze_count(), gc.get_threshold()[0]
[result] = materialize_partitions([transcripts], ["2026-10-01"], sys.argv[1], Path(sys.argv[2]))
print(*before, gc.get_freeze_count(), gc.get_threshold()[0])
"""


def _python(code: str, *args: str) -> list[int]:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return [int(word) for word in done.stdout.split()]


def test_the_heap_is_settled_once_and_cycles_made_after_are_still_collected():
    first, second, young, wanted, cycle_freed = _python(SETTLE_TWICE)
    assert first > 1_000  # the interpreter's and the imports' objects
    assert second == first
    assert young == wanted > 700
    assert cycle_freed


def test_a_step_settles_its_process_heap_before_its_work(database_url):
    frozen_before, young_before, frozen_after, young_after = _python(ONE_STEP, database_url, str(SAMPLE_TRANSCRIPTS))
    assert (frozen_before, young_before) == (0, 700)
    assert frozen_after > 100_000  # Dagster's, pandas' and great-expectations' objects among them
    assert young_after > young_before

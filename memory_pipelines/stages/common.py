"""What every stage shares: the days a run covers, the typed report a stage returns, the
model back ends it is given and the helper that runs independent work side by side.

A stage (`memory_pipelines.stages.<stage>`) owns its reads, its calls of the pure functions
and its writes, behind one entry point `run(pool, window, settings, backends) -> StageReport`.
No Dagster here: the assets are thin wrappers that turn a report into a materialization.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from time import monotonic
from typing import Any, Generic, Self, TypeVar

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.db import facts_chunks as facts_chunks_db
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.embed import Embedder
from memory_pipelines.llm.backends import ModelBackend, ModelCall
from memory_pipelines.records import Message, TimeWindow
from memory_pipelines.shards import ALL_USERS, Shard

ONE_DAY = timedelta(days=1)


def day_window(partition_key: str) -> TimeWindow:
    """The UTC day a daily partition key names."""
    start = datetime.fromisoformat(partition_key).replace(tzinfo=UTC)
    return TimeWindow(start, start + ONE_DAY)


# (stage, days) -> a context whose value is called once per day done; None: no progress shown
ProgressBars = Callable[[str, int], AbstractContextManager[Callable[[], None]]]
_progress_bars: ProgressBars | None = None
PROGRESS_MIN_DAYS = 30  # shorter ranges finish before a bar tells anything


@contextmanager
def progress_bars(bars: ProgressBars) -> Iterator[None]:
    """Show a bar per stage over its days while inside (the CLI's in-process runs: a step in
    another process shows none and logs only)."""
    global _progress_bars
    previous, _progress_bars = _progress_bars, bars
    try:
        yield
    finally:
        _progress_bars = previous


@dataclass(frozen=True)
class Window:
    """The consecutive days one run covers, in order, the run's id (every row a stage writes
    names it) and the users it works for: one shard's (every user's, unsharded)."""

    partition_keys: tuple[str, ...]
    run_id: str
    shard: Shard = ALL_USERS

    def __post_init__(self) -> None:
        if not self.partition_keys:
            raise ValueError("a stage window needs at least one day")

    @property
    def first(self) -> str:
        return self.partition_keys[0]

    @property
    def last(self) -> str:
        return self.partition_keys[-1]

    @property
    def span(self) -> TimeWindow:
        return TimeWindow(day_window(self.first).start, day_window(self.last).end)

    @property
    def label(self) -> str:
        return self.first if self.first == self.last else f"{self.first}..{self.last}"

    def days(self, stage: str, only: Collection[str] | None = None) -> Iterator[tuple[str, TimeWindow]]:
        """The days in order (those in `only`, when given: the days with work), each with its
        UTC window; a long range advances `stage`'s bar over all of them."""
        bars = _progress_bars
        shown = bars is not None and len(self.partition_keys) >= PROGRESS_MIN_DAYS
        with bars(stage, len(self.partition_keys)) if shown else nullcontext(lambda: None) as advance:
            for key in self.partition_keys:
                if only is None or key in only:
                    yield key, day_window(key)
                advance()

    def active_days(self, pool: ConnectionPool, reach: timedelta = timedelta(0)) -> frozenset[str]:
        """The window's days with a message, or on which one sent at most `reach` before the
        day began goes stale: a day outside them has no work for a stage whose work is the
        day's messages (and sessions gone stale in it)."""
        with pool.connection() as conn:
            return summaries_db.active_days(conn, self.span, reach, self.shard)


@dataclass(frozen=True)
class Backends:
    """The back ends a stage may call: `judge` decides (noise, relevance), `writer` writes
    memory (summaries, facts, knowledge), `embedder` embeds. A stage uses what it needs."""

    judge: ModelBackend | None = None
    writer: ModelBackend | None = None
    embedder: Embedder | None = None


NO_BACKENDS = Backends()


@dataclass(frozen=True)
class CallContext:
    """Where a model call is recorded: the run and the asset that made it."""

    run_id: str
    asset: str

    def record(self, conn: psycopg.Connection, calls: Sequence[ModelCall], partition_key: str | None,
               session_id: str | None) -> None:
        self.record_all(conn, [(call, partition_key, session_id) for call in calls])

    def record_all(self, conn: psycopg.Connection, made: Sequence[tuple[ModelCall, str | None, str | None]]) -> None:
        """Calls of several sessions at once: (call, partition key, session id) each."""
        summaries_db.insert_llm_calls(conn, made, run_id=self.run_id, asset=self.asset)


@dataclass(frozen=True)
class StageFailure:
    """A session (or a user's memory summary) a stage left as it was, and why; the next run
    or the step's retry does it again."""

    session_id: str | None
    partition_key: str | None
    reason: str
    budget_reached: bool = False  # stopped by the run's token budget: a retry cannot help
    user_id: str | None = None  # for work of a user's rather than a session's
    work: str = "memory_summary"  # what of the user's it was

    def __str__(self) -> str:
        subject = self.session_id or f"{self.work} of {self.user_id}"
        return f"{subject} {self.partition_key}: {self.reason}" if self.partition_key else f"{subject}: {self.reason}"


@dataclass
class Counts:
    """A stage's typed counts; each stage subclasses it with its own fields, whose names are
    the metadata keys. Merging adds numbers, adds up Counters and keeps the newer value of
    anything else."""

    def add(self, other: "Counts") -> None:
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, Counter):
                mine.update(theirs)
            elif isinstance(mine, int | float) and not isinstance(mine, bool):
                setattr(self, f.name, mine + theirs)
            elif theirs not in (None, "", {}, []):
                setattr(self, f.name, theirs)

    def metadata(self) -> dict[str, Any]:
        return {f.name: dict(sorted(v.items())) if isinstance(v := getattr(self, f.name), Counter) else v
                for f in fields(self)}

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> Self:
        """The counts `metadata()` gave, back from a materialization's metadata values by
        the field names (other keys left alone); a Counter field's value a Counter again."""
        return cls(**{f.name: Counter(metadata[f.name]) if f.default_factory is Counter else metadata[f.name]
                      for f in fields(cls)})

    def headline(self) -> str:
        """The non-zero numbers, for a log line."""
        return ", ".join(f"{name} {v}" for name, v in self.metadata().items()
                         if isinstance(v, int) and not isinstance(v, bool) and v)


C = TypeVar("C", bound=Counts)


@dataclass
class StageReport(Generic[C]):
    """What a stage did: its counts, the model calls it made, what it left undone and why,
    a few rows to preview, whom it wrote for, and what its quality checks bind besides the
    partition scope (the users or sessions it wrote, the model)."""

    counts: C
    calls: list[ModelCall] = field(default_factory=list)
    failures: list[StageFailure] = field(default_factory=list)
    preview: list[dict] = field(default_factory=list)
    users: set[str] = field(default_factory=set)
    sessions: set[str] = field(default_factory=set)
    check_scope: dict[str, Any] = field(default_factory=dict)
    calls_models: bool = False  # a stage that may call a model reports its calls, even none
    warnings: list[str] = field(default_factory=list)  # what the run should tell besides failures
    extra_previews: dict[str, list[dict]] = field(default_factory=dict)  # metadata key -> rows

    def merge(self, other: "StageReport[C]") -> None:
        self.counts.add(other.counts)
        self.calls.extend(other.calls)
        self.failures.extend(other.failures)
        self.preview.extend(other.preview)
        self.users |= other.users
        self.sessions |= other.sessions
        self.check_scope.update(other.check_scope)
        self.calls_models |= other.calls_models
        self.warnings.extend(other.warnings)
        for name, rows in other.extra_previews.items():
            self.extra_previews.setdefault(name, []).extend(rows)


def chunk_spans(chunks: Sequence[summaries_db.DistilledChunk], messages: Sequence[Message]
                ) -> list[tuple[summaries_db.DistilledChunk, list[Message]]]:
    """Each chunk with its messages (a session's, by seq): those in its seq span."""
    seqs = [m.seq for m in messages]
    return [(c, list(messages[bisect_left(seqs, c.first_seq):bisect_right(seqs, c.last_seq)])) for c in chunks]


T = TypeVar("T")
R = TypeVar("R")

# Sessions read, worked on and written per transaction: one query per kind of read for all of
# them, and few enough that a transaction stays short.
BATCH_SESSIONS = 200


def session_batches(items: Sequence[T], writer: ModelBackend | None = None,
                    concurrency: int = 1) -> Iterator[Sequence[T]]:
    """`items` in consecutive batches of BATCH_SESSIONS. A model's token budget is checked
    against the calls committed, so with one set a batch holds only as many sessions as
    calls may be in flight at once, and the budget stops a run where it would have."""
    size = max(concurrency, 1) if writer is not None and writer.config.token_budget else BATCH_SESSIONS
    for start in range(0, len(items), size):
        yield items[start:start + size]


def map_parallel(items: Sequence[T], work: Callable[[T], R], concurrency: int) -> list[R]:
    """`work` over independent items (sessions, batches, model calls), `concurrency` at a
    time; the results in the items' order."""
    return list(map_in_order(items, work, concurrency))


def map_in_order(items: Sequence[T], work: Callable[[T], R], concurrency: int) -> Iterator[R]:
    """`work` over independent items, `concurrency` at a time, each result given in the
    items' order as soon as it is done (a caller stores one while later ones run)."""
    if concurrency <= 1 or len(items) <= 1:
        yield from (work(item) for item in items)
        return
    with ThreadPoolExecutor(max_workers=concurrency) as executor:
        yield from executor.map(work, items)


COMMIT_SECONDS = 0.5  # the most work a stopped run loses


def commit_in_slices(conn: psycopg.Connection, items: Iterable[T], store: Callable[[T], None],
                     flush: Callable[[], None] | None = None, seconds: float = COMMIT_SECONDS) -> None:
    """`store` each item, committing whenever `seconds` have passed since the last commit
    (the time taken to produce an item counts: it may be a model call). An item that takes
    longer, as a real model's call does, commits on its own, so a stopped run keeps what it
    built; cheap items share a commit, and their writes one pipeline. `flush` writes what
    `store` held back, at the end of each slice, in its transaction (out of the pipeline: it
    may `COPY`)."""
    pending = iter(items)
    done = False
    while not done:
        with conn.transaction():
            with conn.pipeline():
                deadline = monotonic() + seconds
                done = True
                for item in pending:
                    store(item)
                    if monotonic() >= deadline:
                        done = False
                        break
            if flush is not None:
                flush()


class Slices:
    """A connection's items committed in slices, as `commit_in_slices` does, for loops that
    cannot run in a pipeline (a COPY) or must choose where a slice ends (locks). Each item
    is a savepoint: one that fails undoes only itself, and what the slice did before it is
    committed before the error goes on.

        with Slices(conn) as slices:
            for item in items:
                with slices.item(sessions, users) as first:  # first: the item begins a new transaction
                    ...

    An item holds its sessions' and users' locks. A slice holding locks waits for no more
    (locks taken out of order would deadlock two runs): an item joins the slice only if it
    takes its locks at once, and otherwise begins a new slice, where it waits for them.
    """

    def __init__(self, conn: psycopg.Connection, seconds: float = COMMIT_SECONDS) -> None:
        self.conn, self.seconds, self.began = conn, seconds, None
        self._slice = ExitStack()

    def __enter__(self) -> Slices:
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self._commit()

    @contextmanager
    def item(self, sessions: Sequence[str] = (), users: Sequence[str] = ()) -> Iterator[bool]:
        """One item holding the locks of `sessions` and `users`: commits the slice first when
        it is `seconds` old or another transaction holds one of the locks; yields whether the
        item begins a new slice."""
        if self.began is not None and (monotonic() - self.began >= self.seconds or (
                (sessions or users) and not facts_chunks_db.try_lock_sessions_and_users(self.conn, sessions, users))):
            self._commit()
        first = self.began is None
        if first:
            if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
                self.conn.commit()  # a read between slices began a transaction: it ends here, not the slice
            self._slice.enter_context(self.conn.transaction())
            self.began = monotonic()
            if sessions:
                summaries_db.lock_sessions(self.conn, sessions)
            if users:
                facts_chunks_db.lock_users(self.conn, users)
        try:
            with self.conn.transaction():  # a savepoint within the slice's transaction
                yield first
        except BaseException:
            if self.conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
                self._commit()
            raise

    def _commit(self) -> None:
        self._slice.close()
        self.began = None


def run_parallel(items: Sequence[T], work: Callable[[T], StageReport[C]], into: StageReport[C],
                 concurrency: int) -> StageReport[C]:
    """`work` over independent items, each giving a report, merged into `into` in order."""
    for report in map_parallel(items, work, concurrency):
        into.merge(report)
    return into

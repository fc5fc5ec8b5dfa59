"""`bench distill`, `bench cost` and `bench backfill`: the figures of a run of the whole graph
over generated transcripts (stages, model calls and tokens, what the database server did),
and their tables. The runs themselves are made by `assets.bench.distill`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

from memory_pipelines.llm.pricing import Price


@dataclass(frozen=True)
class PurposeUsage:
    """The model calls of one purpose in a run, and their tokens."""
    calls: int
    input_tokens: int
    output_tokens: int
    schema_retried: int  # calls whose first answer broke the schema and were asked again
    failed: int


SAMPLE_SECONDS = 0.2  # how often the benchmark samples what the server's connections do


@dataclass(frozen=True)
class DatabaseLoad:
    """What the database server did while the runs ran: client backends sampled every
    SAMPLE_SECONDS, the server's counters read before and after (they include Dagster's storage,
    which lives in the same database)."""

    seconds: float
    connections_peak: int  # client connections open at once, the sampler's own aside
    active_peak: int  # of them running a statement at once
    # backend-seconds by what a connection was doing when sampled, as kind -> event: "CPU"
    # (running), a wait's type and event ("Lock" -> "transactionid", "LWLock" -> "WALWrite",
    # "IO" -> "WalSync", ...) or "idle in transaction"
    doing_seconds: dict[str, dict[str, float]]
    wal_bytes: int
    wal_full_pages: int  # full-page images: the first change of a page after a checkpoint
    wal_buffers_full: int  # WAL written out early because its buffers were full
    checkpoints_requested: int  # checkpoints forced by WAL volume (max_wal_size), not by time
    commits: int
    rollbacks: int
    deadlocks: int
    # the server's processes' CPU, the sampler's backend aside; None when it runs elsewhere
    server_cpu_seconds: float | None
    machine_cpu_seconds: float  # every process's CPU on this machine
    # the benchmark process's CPU, the sampling thread aside: the pipeline's Python with its
    # threads and DuckDB's (with the dask executor, the workers' processes are not in it)
    process_cpu_seconds: float
    machine_iowait_seconds: float
    cores: int
    # the sampling's own CPU, left out of the two above (the benchmark's instrument, not the
    # pipeline or the database's work for it): its thread's, its server backend's
    sampler_process_cpu_seconds: float
    sampler_server_cpu_seconds: float

    def waiting_seconds(self, kind: str) -> float:
        """Backend-seconds spent on one kind of wait (Lock, LWLock, IO, ...)."""
        return sum(self.doing_seconds.get(kind, {}).values())

    def to_json(self) -> dict:
        return {**asdict(self), "lock_wait_seconds": self.waiting_seconds("Lock"),
                "lwlock_wait_seconds": self.waiting_seconds("LWLock"), "io_wait_seconds": self.waiting_seconds("IO")}


def database_markdown(load: DatabaseLoad, messages: int) -> list[str]:
    """The server's load as table lines, with each amount per 1,000 messages."""
    def per_k(amount: float) -> str:
        return f"{1000 * amount / messages:,.2f}" if messages else "-"

    def share(amount: float) -> str:
        return f"{100 * amount / (load.seconds * load.cores):.0f} % of {load.cores} cores" if load.seconds else "-"

    cpu = load.server_cpu_seconds
    lines = ["", f"Database server during the runs ({load.seconds:.1f} s):", "",
             "| measure | amount | per 1,000 messages | note |", "|---|---|---|---|",
             f"| connections open at once (peak) | {load.connections_peak} | | {load.active_peak} running a statement |",
             f"| server CPU seconds | {'-' if cpu is None else f'{cpu:.1f}'} | {'-' if cpu is None else per_k(cpu)} "
             f"| {'not on this machine' if cpu is None else share(cpu)} |",
             f"| this process's CPU seconds (the pipeline) | {load.process_cpu_seconds:.1f} "
             f"| {per_k(load.process_cpu_seconds)} | {share(load.process_cpu_seconds)} |",
             f"| the sampling's own CPU seconds (left out of the two above) | {load.sampler_process_cpu_seconds:.1f} "
             f"+ {load.sampler_server_cpu_seconds:.1f} | | its thread + its server backend, every {SAMPLE_SECONDS} s |",
             f"| machine CPU seconds (every process) | {load.machine_cpu_seconds:.1f} | {per_k(load.machine_cpu_seconds)} "
             f"| {share(load.machine_cpu_seconds)}; I/O wait {load.machine_iowait_seconds:.1f} s |",
             f"| WAL MB | {load.wal_bytes / 1_048_576:,.1f} | {per_k(load.wal_bytes / 1_048_576)} "
             f"| {load.wal_bytes / 1_048_576 / load.seconds if load.seconds else 0:,.1f} MB/s; {load.wal_full_pages:,} full pages; "
             f"buffers full {load.wal_buffers_full:,}; {load.checkpoints_requested} checkpoints forced by volume |",
             f"| commits | {load.commits:,} | {per_k(load.commits)} "
             f"| {load.commits / load.seconds if load.seconds else 0:,.0f}/s; {load.rollbacks:,} rollbacks, {load.deadlocks} deadlocks |"]
    for kind in ("Lock", "LWLock", "IO"):
        lines.append(f"| backend-seconds waiting on {kind} | {load.waiting_seconds(kind):.2f} | | |")
    busiest = sorted(((spent, kind, event) for kind, events in load.doing_seconds.items()
                      for event, spent in events.items()), key=lambda row: (-row[0], row[1], row[2]))[:8]
    lines += ["", "| what connections were doing (sampled) | backend-seconds |", "|---|---|"]
    lines += [f"| {kind}: {event} | {spent:.1f} |" if event else f"| {kind} | {spent:.1f} |"
              for spent, kind, event in busiest]
    return lines


@dataclass(frozen=True)
class EmbedderRate:
    """The run's embedder alone on the texts the run embedded, in the same process after the
    run (its model loaded, its batch size), nothing else working."""
    model: str  # back end:model:dimension, as rows record it
    rows: int  # rows the run embedded
    texts: int  # of their texts, distinct (what an embedder must embed: a repeated text is embedded once)
    tokens: int | None  # as the model reads them (words for hashing; None when unknown)
    seconds: float
    load_seconds: float = 0.0  # loading it, before the run (once per process), apart from both timings

    @property
    def texts_per_second(self) -> float:
        return self.texts / self.seconds if self.seconds else 0.0

    @property
    def tokens_per_second(self) -> float | None:
        return self.tokens / self.seconds if self.tokens is not None and self.seconds else None


@dataclass(frozen=True)
class DistillBench:
    """One run of the whole graph over generated transcripts (`bench distill` and `bench cost`)."""

    backend: str
    users: int
    sessions: int
    messages: int
    days: int  # the range run, first to last day with messages
    days_with_data: int
    seconds: float
    peak_rss_mb: float
    stage_seconds: dict[str, float]
    table_bytes: dict[str, int]
    usage: dict[str, PurposeUsage]  # purpose -> its calls and tokens
    summarized_session_days: int  # (session, day) pairs with a summary written by a call
    # the same range through the same assets and checks with bodies that do nothing: what
    # Dagster's own bookkeeping of the run costs (measured by `bench backfill` only)
    bookkeeping_seconds: float | None = None
    shards: int = 1  # runs at once, one per user shard
    executor: str = "in_process"  # where the runs' steps executed
    database: DatabaseLoad | None = None  # what the server did during the runs
    embedder: EmbedderRate | None = None  # the embedder alone on the run's texts (`bench distill`)

    @property
    def messages_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def ratio_to_embedder(self) -> float | None:
        """End-to-end seconds / the embedder's own seconds on the same texts: what the
        pipeline adds on top of its embedder (1.0: nothing)."""
        return self.seconds / self.embedder.seconds if self.embedder and self.embedder.seconds else None

    @property
    def embedder_share(self) -> float | None:
        """The share of the run the embedder's own work on its texts accounts for."""
        return self.embedder.seconds / self.seconds if self.embedder and self.seconds else None

    @property
    def model_calls(self) -> int:
        return sum(u.calls for u in self.usage.values())

    @property
    def process_to_server_cpu(self) -> float | None:
        """The pipeline process's CPU over the database server's (issue 41: at most 1 offline)."""
        load = self.database
        if load is None or not load.server_cpu_seconds:
            return None
        return load.process_cpu_seconds / load.server_cpu_seconds

    def per_1000_messages(self, amount: float) -> float:
        return 1000 * amount / self.messages if self.messages else 0.0

    def per_session_day(self, amount: float) -> float:
        return amount / self.summarized_session_days if self.summarized_session_days else 0.0

    @property
    def distillation_calls(self) -> int:
        """The calls that distil transcripts into memory: judging and the chunks' distillation
        (the users' narratives and the tree's nodes are written from stored memory)."""
        return sum(self.usage[p].calls for stage in DISTILLATION_STAGES for p in PURPOSES_BY_STAGE[stage]
                   if p in self.usage)

    @property
    def input_tokens(self) -> int:
        return sum(u.input_tokens for u in self.usage.values())

    @property
    def output_tokens(self) -> int:
        return sum(u.output_tokens for u in self.usage.values())

    def cost_usd(self, price: Price) -> float:
        return price.cost(self.input_tokens, self.output_tokens)

    def to_json(self, prices: Mapping[str, Price] | None = None) -> dict:
        rate = self.embedder
        return {**asdict(self), "database": self.database.to_json() if self.database else None,
                "messages_per_s": self.messages_per_s, "messages_per_second": self.messages_per_s,
                "embedder_texts_per_second": rate.texts_per_second if rate else None,
                "embedder_tokens_per_second": rate.tokens_per_second if rate else None,
                "embedder_share": self.embedder_share, "ratio_to_embedder": self.ratio_to_embedder,
                "target_ratio_to_embedder": EMBEDDER_TARGET_RATIO,
                "process_to_server_cpu": self.process_to_server_cpu, "model_calls": self.model_calls,
                "calls_per_1000_messages": self.per_1000_messages(self.model_calls),
                "calls_per_session_day": self.per_session_day(self.model_calls),
                "distillation_calls_per_session_day": self.per_session_day(self.distillation_calls),
                "input_tokens_per_1000_messages": self.per_1000_messages(self.input_tokens),
                "output_tokens_per_1000_messages": self.per_1000_messages(self.output_tokens),
                "estimated_cost_usd": {model: {"run": self.cost_usd(price),
                                               "per_1000_messages": self.per_1000_messages(self.cost_usd(price)),
                                               "per_session_day": self.per_session_day(self.cost_usd(price))}
                                       for model, price in (prices or {}).items()}}


EMBEDDER_TARGET_RATIO = 1.25  # end-to-end at most this times the embedder's own time on the same texts

# the stages whose steps make the calls of these purposes
PURPOSES_BY_STAGE = {"conversation_segments": ("judge_segments",),
                     "session_summaries": ("distill", "find_overturned"),
                     "memory_facts": ("summarize_facts",), "memory_tree": ("summarize_node",)}
DISTILLATION_STAGES = ("conversation_segments", "session_summaries")


def distill_markdown(result: DistillBench, prices: Mapping[str, Price] | None = None) -> str:
    per_k = result.per_1000_messages
    lines = [
        f"{result.messages:,} messages, {result.sessions:,} sessions, {result.users:,} users, {result.days} days, "
        f"{result.summarized_session_days:,} summarized session-days; model back end {result.backend}; "
        f"{result.shards} shard run(s) at once, executor {result.executor}",
        "",
        "| stage | seconds | messages/s | model calls | calls per 1,000 messages | input tokens per 1,000 messages "
        "| output tokens per 1,000 messages |",
        "|---|---|---|---|---|---|---|",
    ]
    for stage, seconds in result.stage_seconds.items():
        used = [result.usage[p] for p in PURPOSES_BY_STAGE.get(stage, ()) if p in result.usage]
        calls = sum(u.calls for u in used)
        rate = result.messages / seconds if seconds else 0.0
        lines.append(f"| {stage} | {seconds:.1f} | {rate:,.0f} | {calls:,} | {per_k(calls):.1f} "
                     f"| {per_k(sum(u.input_tokens for u in used)):,.0f} | {per_k(sum(u.output_tokens for u in used)):,.0f} |")
    lines.append(f"| **whole run** | {result.seconds:.1f} | {result.messages_per_s:,.0f} | {result.model_calls:,} "
                 f"| {per_k(result.model_calls):.1f} | {per_k(result.input_tokens):,.0f} | {per_k(result.output_tokens):,.0f} |")
    if result.embedder is not None:
        rate = result.embedder
        tokens = f", {rate.tokens_per_second:,.0f} tokens/s" if rate.tokens_per_second is not None else ""
        lines += ["", f"embedder {rate.model} alone on the run's {rate.texts:,} distinct texts (of "
                      f"{rate.rows:,} rows): {rate.seconds:.1f} s ({rate.texts_per_second:,.0f} texts/s{tokens}; "
                      f"loaded in {rate.load_seconds:.1f} s before the run); {100 * (result.embedder_share or 0):.0f} % "
                      f"of the run; end to end {result.ratio_to_embedder or 0:.2f}x the embedder's own time "
                      f"(target at most {EMBEDDER_TARGET_RATIO}x)"]
    if result.usage:
        lines += ["", "| purpose | calls | calls per summarized session-day | input tokens per 1,000 messages "
                      "| output tokens per 1,000 messages | asked again (schema) | failed |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {purpose} | {u.calls:,} | {result.per_session_day(u.calls):.2f} | {per_k(u.input_tokens):,.0f} "
                  f"| {per_k(u.output_tokens):,.0f} | {u.schema_retried:,} | {u.failed:,} |"
                  for purpose, u in sorted(result.usage.items())]
        lines.append(f"| **all** | {result.model_calls:,} | {result.per_session_day(result.model_calls):.2f} "
                     f"| {per_k(result.input_tokens):,.0f} | {per_k(result.output_tokens):,.0f} "
                     f"| {sum(u.schema_retried for u in result.usage.values()):,} "
                     f"| {sum(u.failed for u in result.usage.values()):,} |")
        lines += ["", f"distillation (judging and the chunks' distillation calls): "
                      f"{result.per_session_day(result.distillation_calls):.2f} calls per summarized session-day; "
                      f"the whole run, with the users' narratives and the tree's nodes: "
                      f"{result.per_session_day(result.model_calls):.2f}"]
    if result.usage and prices:
        lines += ["", "Estimated cost of these tokens at the price table's prices (US dollars):", "",
                  "| model | input / output per million tokens | this run | per 1,000 messages | per session-day |",
                  "|---|---|---|---|---|"]
        lines += [f"| {model} | {price.input_usd_per_mtok:g} / {price.output_usd_per_mtok:g} | {result.cost_usd(price):.4f} "
                  f"| {per_k(result.cost_usd(price)):.4f} | {result.per_session_day(result.cost_usd(price)):.5f} |"
                  for model, price in prices.items()]
    if result.database is not None:
        lines += database_markdown(result.database, result.messages)
    largest = sorted(result.table_bytes.items(), key=lambda kv: (-kv[1], kv[0]))[:12]
    lines += ["", f"peak memory {result.peak_rss_mb:,.0f} MB", "", "| table (largest 12) | size |", "|---|---|"]
    lines += [f"| {table} | {size / 1_048_576:,.2f} MB |" for table, size in largest]
    return "\n".join(lines)


@dataclass(frozen=True)
class BackfillBench:
    """The same generated sessions over a short and a long range (`bench backfill`)."""
    short: DistillBench
    long: DistillBench

    @property
    def ratio(self) -> float:
        return self.long.seconds / self.short.seconds if self.short.seconds else 0.0

    @property
    def ratio_without_bookkeeping(self) -> float | None:
        """long / short of what the stages cost beyond Dagster's bookkeeping of the days; None when
        a range's bookkeeping, timed in a run of its own, took as long as the range itself (data so
        small that timing noise decides: no ratio can be read from it)."""
        work = [run.seconds - (run.bookkeeping_seconds or 0.0) for run in (self.short, self.long)]
        return work[1] / work[0] if min(work) > 0 else None

    def to_json(self) -> dict:
        return {"short": self.short.to_json(), "long": self.long.to_json(), "ratio": self.ratio,
                "ratio_without_bookkeeping": self.ratio_without_bookkeeping, "target_ratio": BACKFILL_TARGET_RATIO}


BACKFILL_TARGET_RATIO = 1.5


def backfill_markdown(result: BackfillBench) -> str:
    lines = ["| range | days with data | messages | seconds | seconds per day | messages/s "
             "| of which Dagster's bookkeeping |", "|---|---|---|---|---|---|---|"]
    for run in (result.short, result.long):
        lines.append(f"| {run.days} days | {run.days_with_data} | {run.messages:,} | {run.seconds:.1f} | "
                     f"{run.seconds / run.days:.2f} | {run.messages_per_s:,.0f} | {run.bookkeeping_seconds or 0:.1f} |")
    without = result.ratio_without_bookkeeping
    lines += ["", f"long / short: {result.ratio:.2f}x (target at most {BACKFILL_TARGET_RATIO}x); "
                  "without Dagster's bookkeeping: "
                  + (f"{without:.2f}x; " if without is not None else "not measurable (a range's bookkeeping took "
                     "as long as the range: too little data); ")
                  + f"model back end {result.short.backend}",
              "", "Dagster's bookkeeping: the same range through the same assets and checks with bodies "
                  "that do nothing (a materialization and a planned check row per asset, check and day)."]
    return "\n".join(lines)

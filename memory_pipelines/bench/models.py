"""`memory-pipelines bench models`: every prompt of the pipeline against a real model server.

A few of the sample's sessions are sent through each prompt the way the stages send them
(judging, the distillation of each summary chunk, overturned entries, relevance, the user
narrative, a tree node; and the summary a merge writes and the API's text distillation),
straight to the server: no database and no run. Per
purpose it reports how many answers were schema-valid on the first try, after the one
retry, or not at all, the latency and the tokens; for the prompts whose lists are taken
item by item, how many items were kept and rejected. The issue's bar: valid after at most
one retry for at least 95 % of the calls of every purpose.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from pathlib import Path
from typing import Any

from memory_pipelines.bench.retrieval import percentile
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.core.fact_extraction import validate_items
from memory_pipelines.core.knowledge_entries import prepare
from memory_pipelines.llm.backends import ModelCall, ModelError, PromptedBackend
from memory_pipelines.llm.rendering import render_transcript
from memory_pipelines.records import Distillation, Message, Summary, TimeWindow
from memory_pipelines.core.noise_filter import cut_segments
from memory_pipelines.core.summary_fold import chunk_messages
from memory_pipelines.sources import SourceSettings, inventory_of, open_source
from memory_pipelines.sources.files import MemoryIndex

VALID_TARGET = 0.95  # of every purpose's calls, valid after at most one retry
RELEVANCE_REQUEST = "What should I keep in mind for my next task?"
PURPOSES = ("judge_segments", "distill", "find_overturned", "select_relevant", "summarize_facts", "summarize_node",
            "summarize", "synthesize_knowledge")


@dataclass(frozen=True)
class PurposeFigures:
    purpose: str
    calls: int
    valid_first_try: int
    valid_after_retry: int
    failed: int
    latency_p50_ms: float
    latency_p95_ms: float
    input_tokens: int
    output_tokens: int
    items_kept: int | None  # facts, or entries and relations; None: the answer has no item lists
    items_rejected: int | None

    @property
    def valid_rate(self) -> float:
        return (self.valid_first_try + self.valid_after_retry) / self.calls if self.calls else 0.0

    def to_json(self) -> dict:
        return {**self.__dict__, "valid_rate": self.valid_rate, "meets_target": self.valid_rate >= VALID_TARGET}


def sample_sessions(count: int, location: Path = SAMPLE_TRANSCRIPTS) -> list[list[Message]]:
    """The `count` longest sessions of a transcript location (the sample's by default), read
    as a run reads them (the source's own parsing and validation), by seq."""
    found = inventory_of(str(location))
    window = TimeWindow(datetime.combine(found.first_day, time(), UTC),
                        datetime.combine(found.last_day + timedelta(days=1), time(), UTC))
    plan = open_source(SourceSettings(location=str(location)), MemoryIndex()).plan(window, include_undated=True)
    by_session: dict[str, list[Message]] = {}
    for day in plan.windows:
        for scan in plan.read(day):
            for message in scan.messages:
                by_session.setdefault(message.session_id, []).append(message)
    longest = sorted(by_session.values(), key=lambda messages: (-len(messages), messages[0].session_id))[:count]
    return [sorted(messages, key=lambda m: m.seq) for messages in longest]


@dataclass(frozen=True)
class _Outcome:
    call: ModelCall
    items_kept: int | None = None
    items_rejected: int | None = None


def _ask(outcomes: list[_Outcome], task: Callable[[], tuple[Any, ModelCall]],
         items: Callable[[Any], tuple[int, int]] | None = None) -> Any:
    """Run one task; record its call (and, for item lists, the items kept and rejected)."""
    try:
        result, call = task()
    except ModelError as exc:
        outcomes.append(_Outcome(exc.call))
        return None
    kept, rejected = items(result) if items else (None, None)
    outcomes.append(_Outcome(call, kept, rejected))
    return result


def run_session(backend: PromptedBackend, messages: Sequence[Message]) -> list[_Outcome]:
    """Every prompt for one session, each fed what the one before produced: the session's
    summary chunks distilled in order, as the summary stage does."""
    outcomes: list[_Outcome] = []
    segments = cut_segments(messages)
    if segments:
        _ask(outcomes, lambda: backend.judge_segments(segments))
    kept = [m for m in messages if m.role != "system"]
    summary = Summary()
    facts: list[tuple[str, str, str]] = []
    for chunk in chunk_messages(kept)[0]:

        def distilled_kept(answer: Distillation, chunk: Sequence[Message] = chunk) -> tuple[int, int]:
            accepted, rejected = validate_items(answer.facts, chunk)
            facts.extend((c.category, c.key, str(c.value)) for c in accepted)
            entries, relations, problems = prepare(answer.items_json(), chunk, chunk[0].session_id, chunk[0].user_id)
            return len(accepted) + len(entries) + len(relations), len(rejected) + len(problems)

        answer = _ask(outcomes, lambda: backend.distill(summary, chunk, "auto"), distilled_kept)
        summary = answer.summary if answer is not None else summary
    _ask(outcomes, lambda: backend.find_overturned(summary, messages[-4:]))
    _ask(outcomes, lambda: backend.select_relevant(summary, RELEVANCE_REQUEST))
    listed = facts or [("notes", "topic", summary.current_discussion or messages[0].content[:200])]
    _ask(outcomes, lambda: backend.summarize_facts(listed))
    parts = [p for p in (*summary.past_discussions, summary.current_discussion) if p] or [messages[0].content[:300]]
    _ask(outcomes, lambda: backend.summarize_node(parts))
    # outside the daily distillation: a merge's summary of a fork's turns, the API's text distillation
    _ask(outcomes, lambda: backend.summarize(Summary(), kept, "auto"))

    def knowledge_kept(raw: Any) -> tuple[int, int]:
        entries, relations, problems = prepare(raw, messages, messages[0].session_id, messages[0].user_id)
        return len(entries) + len(relations), len(problems)

    _ask(outcomes, lambda: backend.synthesize_knowledge(messages, render_transcript(messages), None), knowledge_kept)
    return outcomes


def figures(outcomes: Sequence[_Outcome]) -> list[PurposeFigures]:
    rows = []
    for purpose in PURPOSES:
        mine = [o for o in outcomes if o.call.purpose == purpose]
        if not mine:
            continue
        ok = [o for o in mine if o.call.status == "ok"]
        latencies = [o.call.latency_ms for o in mine]
        with_items = [o for o in ok if o.items_kept is not None]
        rows.append(PurposeFigures(
            purpose, len(mine), sum(not o.call.schema_retried for o in ok), sum(o.call.schema_retried for o in ok),
            len(mine) - len(ok), percentile(latencies, 0.5), percentile(latencies, 0.95),
            sum(o.call.input_tokens for o in mine), sum(o.call.output_tokens for o in mine),
            sum(o.items_kept for o in with_items) if with_items else None,
            sum(o.items_rejected or 0 for o in with_items) if with_items else None))
    return rows


def markdown(rows: Sequence[PurposeFigures], model: str, sessions: int) -> str:
    lines = [f"model {model}, {sessions} sample session(s), every prompt once per session", "",
             "| purpose | calls | valid first try | valid after retry | failed | valid | p50 ms | p95 ms "
             "| input tokens | output tokens | items kept / rejected |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        items = "" if r.items_kept is None else f"{r.items_kept} / {r.items_rejected}"
        mark = "" if r.valid_rate >= VALID_TARGET else " (below 95 %)"
        lines.append(f"| {r.purpose} | {r.calls} | {r.valid_first_try} | {r.valid_after_retry} | {r.failed} "
                     f"| {r.valid_rate:.0%}{mark} | {r.latency_p50_ms:,.0f} | {r.latency_p95_ms:,.0f} "
                     f"| {r.input_tokens:,} | {r.output_tokens:,} | {items} |")
    return "\n".join(lines)

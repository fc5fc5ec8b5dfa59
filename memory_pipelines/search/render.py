"""Hits as the memory_search tool prints them (the navi shape), with what a search spent."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memory_pipelines.search.hits import MemoryHit, ServedMemory


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M") if moment else "unknown time"


def _span(first: datetime | None, last: datetime | None) -> str:
    if first is None or last is None or first.date() != last.date():
        return f"{_when(first)} – {_when(last)}"
    return f"{_when(first)}–{last:%H:%M}"


def format_hits(text: str, scope: str, hits: Sequence[MemoryHit], excerpt_chars: int = 600) -> str:
    """The memory_search tool output, in the navi shape. Each hit names its row as
    `memory-pipelines lineage` takes it (fact #12 -> `lineage fact 12`, chunk, entry, a
    passage's best turn); a raw excerpt read from the message archive is `message`."""
    lines = [f'memory_search "{text}" (scope={scope}): {len(hits)} hit(s)']
    for number, hit in enumerate(hits, start=1):
        lines.append("")
        if hit.source_type == "fact":
            lines.append(f"{number}. fact #{hit.id} [{hit.category}] · session {hit.session_id} · "
                         f"updated {_when(hit.timestamp)}")
            lines.append(f"   {hit.text}")
        elif hit.source_type == "raw" and hit.turns:
            best = next((t.id for t in hit.turns if t.seq == hit.best_seq), hit.turns[0].id)
            lines.append(f"{number}. passage · turn #{best} · session {hit.session_id} · turns {hit.start_seq}–"
                         f"{hit.end_seq} · {_span(hit.started_at, hit.timestamp)} · {', '.join(hit.roles)}")
            why = [f"matched: {', '.join(hit.terms)}"] if hit.terms else []
            why += [f"similarity {hit.similarity:.2f}"] if hit.similarity is not None else []
            if why:
                lines.append(f"   {' · '.join(why)}")
            if hit.fork is not None:
                lines.append(f"   ⑂ fork of {hit.fork.parent_session_id} after turn {hit.fork.fork_seq}")
            if hit.path:  # forest recall: the nodes descended to it
                lines.append(f"   via {' › '.join(step.split(': ', 1)[0] for step in hit.path)}")
            if hit.superseded_by:
                lines.append(f"   ⚠ outdated: a newer statement overrides this ({hit.superseded_by})")
            lines.extend(f"   {line}" for line in hit.text.splitlines())
        elif hit.source_type == "raw":
            row = f"chunk #{hit.id}" if hit.id is not None else "message"
            lines.append(f"{number}. raw {row} · session {hit.session_id} · turn {hit.start_seq}–{hit.end_seq} · "
                         f"{_when(hit.timestamp)}")
            if hit.superseded_by:
                lines.append(f"   ⚠ outdated: a newer statement overrides this ({hit.superseded_by})")
            if hit.before_summary:
                lines.append("   ℹ verbatim record from before the current summary")
            if hit.breadcrumbs:
                lines.append(f"   keys: {', '.join(hit.breadcrumbs[:8])}")
            body = hit.text if len(hit.text) <= excerpt_chars else hit.text[: excerpt_chars - 1] + "…"
            lines.extend(f"   {line}" for line in body.splitlines())
        elif hit.source_type == "knowledge":
            lines.append(f"{number}. knowledge entry #{hit.id} [{hit.kind}] · {hit.category} · session {hit.session_id} · "
                         f"{_when(hit.timestamp)}")
            if hit.superseded_by:
                lines.append(f"   ⚠ outdated: a newer statement overrides this ({hit.superseded_by})")
            lines.append(f"   {hit.text}")
        else:
            lines.append(f"{number}. sketch #{hit.id} [{hit.section}] · session {hit.session_id} · "
                         f"{_when(hit.timestamp)}")
            lines.append(f"   {hit.text}")
    return "\n".join(lines)


def format_served(text: str, scope: str, served: ServedMemory) -> str:
    """`format_hits` of what a search served, with what it spent of its budget (the hits'
    text, as an agent reads it: the numbered header lines are not counted) and the time the
    question named."""
    budget = served.budget
    unit = "characters" if budget.unit == "chars" else "tokens (estimated)"
    spent = f"{budget.used} of {budget.limit}" if budget.limit is not None else f"{budget.used} (no budget)"
    tail = [f"{unit} used: {spent}" + (f"; {served.left_out} more hit(s) did not fit" if served.left_out else "")]
    if served.time_range is not None:
        tail.append(f"time named: {served.time_range.phrase!r} = {served.time_range.since:%Y-%m-%d} .. "
                    f"{served.time_range.until:%Y-%m-%d} (its passages first)")
    return "\n".join([format_hits(text, scope, served.hits), "", *tail])

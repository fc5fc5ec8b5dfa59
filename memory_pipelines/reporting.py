"""Small text renderings for materialization metadata and the CLI."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memory_pipelines.pii import sanitize


def _cell(value: Any, width: int) -> str:
    # previews land in Dagster's event log, which outlives forgetting: never put PII there
    text = "" if value is None else sanitize(str(value)).text
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def markdown_table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, limit: int = 10,
                   width: int = 60) -> str:
    """A markdown table of at most `limit` rows, each cell PII-redacted and cut to `width` characters."""
    if not rows:
        return "_no rows_"
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows[:limit]:
        lines.append("| " + " | ".join(_cell(row.get(c), width) for c in columns) + " |")
    if len(rows) > limit:
        lines.append(f"\n_{len(rows) - limit} more rows not shown_")
    return "\n".join(lines)

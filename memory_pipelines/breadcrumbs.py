"""Breadcrumbs: the entities a later question will use, extracted deterministically.

URLs, inline code, file paths, snake_case / CamelCase / CONSTANT / kebab-case
identifiers, amounts with units (`4,5 GB`, `12 ms`, `80%`), `#ticket` numbers, quoted
phrases and `port NNNN`. Ranked by kind (most specific first), then by how often they
occur, then by first appearance.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_BREADCRUMBS = 40

_UNITS = r"(?:%|ms|µs|us|ns|s|sec|min|h|KB|MB|GB|TB|KiB|MiB|GiB|TiB|kB|Mbps|Gbps|rps|req/s|qps|x|°C|€|EUR|USD)"
_FILE_TYPES = r"(?:py|toml|ya?ml|json|jsonl|md|sql|sh|ts|tsx|js|go|rs|conf|ini|cfg|env|txt|log|csv|parquet|lock|tf)"
# (kind, pattern, group to keep, hint); earlier kinds rank first. The hint is what every match
# holds, found in one quick scan (a literal or a character class the regex engine skips to): a
# text without it is not scanned by the pattern, whose lookbehinds and alternations test at
# every position (most texts hold few of the hints: a quarter of the scans' time).
PATTERNS: tuple[tuple[str, re.Pattern[str], int, re.Pattern[str]], ...] = (
    ("url", re.compile(r"\bhttps?://[^\s<>\"'`)\]]+[^\s<>\"'`)\].,;:!?]"), 0, re.compile("://")),
    ("code", re.compile(r"`([^`\n]{2,80})`"), 1, re.compile("`")),
    # absolute or ./ paths, relative paths with an extension, or with two or more slashes
    # (so "and/or" is not a path)
    ("path", re.compile(
        r"(?<![\w/.:-])(?:(?:~|\.{1,2})?/[\w.-]+(?:/[\w.-]+)*|[\w.-]+(?:/[\w.-]+)+\.\w{1,8}|[\w.-]+(?:/[\w.-]+){2,})"
        r"(?<![.,;:])(?![\w/])"), 0, re.compile("/")),
    ("file", re.compile(r"(?<![\w/.-])[\w-]+\." + _FILE_TYPES + r"\b"), 0, re.compile(r"\." + _FILE_TYPES + r"\b")),
    # ticket and amount look behind after their first character, not before it: the same
    # matches, but the engine skips to a `#` or a digit instead of trying every position
    ("ticket", re.compile(r"#(?<![\w&]#)\d{2,7}\b"), 0, re.compile("#")),
    ("port", re.compile(r"\bport\s+(\d{2,5})\b", re.IGNORECASE), 0, re.compile(r"port\s", re.IGNORECASE)),
    ("amount", re.compile(r"\d(?<![\w.,]\d)\d*(?:[.,]\d+)?\s?" + _UNITS + r"(?![\w])"), 0, re.compile(r"\d")),
    ("constant", re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b"), 0, re.compile("_")),
    ("snake", re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b"), 0, re.compile("_")),
    ("camel", re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b|\b[a-z]+(?:[A-Z][a-z0-9]+)+\b"), 0,
     re.compile(r"[a-z0-9][A-Z]")),
    ("kebab", re.compile(r"\b[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b"), 0, re.compile("-")),
    # a short phrase between quotes that starts and ends with a letter or digit
    ("quoted", re.compile(r"[\"“«](\w[^\"”»\n=,;(){}]{1,58}\w)[\"”»]"), 1, re.compile("[\"“«]")),
)


# Kinds whose matches lie inside one run of non-space characters and look around no further
# than its ends: they are scanned in the runs that hold a hint of any of them, joined by
# spaces, where they match exactly as in the whole text (a fifth of a chunk's characters:
# these eight scans were most of the extraction's time).
_IN_ONE_RUN = frozenset({"url", "path", "file", "ticket", "constant", "snake", "camel", "kebab"})
# (a match starts only where a run does: a run without a hint is read once, not once per character)
_HINTED_RUNS = re.compile(r"(?<!\S)\S*?(?:[-_/#.]|[a-z0-9][A-Z])\S*")


def hinted_runs(text: str) -> str:
    """The runs of non-space characters in `text` that hold a hint of a kind in _IN_ONE_RUN,
    joined by spaces."""
    return " ".join(_HINTED_RUNS.findall(text))


def extract_breadcrumbs(texts: Iterable[str], limit: int = MAX_BREADCRUMBS) -> list[str]:
    found: dict[str, tuple[int, int, int]] = {}  # crumb -> (kind rank, -count, first position)
    position = 0
    for text in texts:
        runs = hinted_runs(text)
        for rank, (kind, pattern, group, hint) in enumerate(PATTERNS):
            scanned = runs if kind in _IN_ONE_RUN else text
            if not hint.search(scanned):
                continue
            for match in pattern.finditer(scanned):
                crumb = " ".join(match.group(group).split()).strip()
                if len(crumb) < 2 or len(crumb) > 200:
                    continue
                position += 1
                if crumb in found:
                    best, count, first = found[crumb]
                    found[crumb] = (min(best, rank), count - 1, first)
                else:
                    found[crumb] = (rank, -1, position)
    ranked = sorted(found, key=lambda c: found[c])
    return ranked[:limit]


def merge_breadcrumbs(first: Iterable[str], then: Iterable[str], limit: int = MAX_BREADCRUMBS) -> list[str]:
    """The union of two ranked lists: all of `first`, then `then`, without repeats."""
    merged: list[str] = []
    seen: set[str] = set()
    for crumb in (*first, *then):
        if crumb.casefold() not in seen:
            seen.add(crumb.casefold())
            merged.append(crumb)
    return merged[:limit]

"""Named SQL blocks loaded once from `sql/queries/*.sql`.

A block starts with a line `-- name: NAME` and runs to the next such line. Names are
unique across files; a duplicate is an error rather than a silent override.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

_NAME = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def sql_dir() -> Path:
    """`memory_pipelines/_sql` in an installed wheel, the repo's `sql/` in a checkout."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "_sql", package.parent / "sql"):
        if (candidate / "migrations").is_dir():
            return candidate
    raise FileNotFoundError(f"no sql/ folder found next to {package}")


def parse_blocks(text: str, origin: str) -> dict[str, str]:
    blocks: dict[str, str] = {}
    matches = list(_NAME.finditer(text))
    for i, match in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip()
        if not body:
            raise ValueError(f"{origin}: query {match.group(1)!r} is empty")
        if match.group(1) in blocks:
            raise ValueError(f"{origin}: query {match.group(1)!r} defined twice")
        blocks[match.group(1)] = body
    return blocks


@cache
def _all_queries() -> dict[str, str]:
    queries: dict[str, str] = {}
    for path in sorted((sql_dir() / "queries").glob("*.sql")):
        for name, body in parse_blocks(path.read_text(encoding="utf-8"), path.name).items():
            if name in queries:
                raise ValueError(f"{path.name}: query {name!r} already defined in another file")
            queries[name] = body
    return queries


def query(name: str) -> str:
    try:
        return _all_queries()[name]
    except KeyError:
        raise KeyError(f"no SQL query named {name!r} under {sql_dir() / 'queries'}") from None

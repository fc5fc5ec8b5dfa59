"""Only `memory_pipelines/db/<area>.py` runs the named PostgreSQL queries (`query(...)`), each
those of its own `sql/queries/<area>.sql`; the DuckDB queries of `transcript_scan.sql` run
where the transcripts are scanned (pure: reads the source)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DUCKDB_AREA = "transcript_scan"
# the migration runner applies the schema's own statements (its bookkeeping table, the extension check)
SCHEMA_RUNNER = ("migrations.py", "schema")


def _areas() -> dict[str, str]:
    return {name: path.stem for path in (ROOT / "sql" / "queries").glob("*.sql")
            for name in re.findall(r"^-- name: (\w+)", path.read_text(encoding="utf-8"), re.M)}


def _query_calls(path: Path) -> list[ast.Call]:
    return [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "query"]


def test_only_db_modules_run_postgres_queries():
    areas = _areas()
    outside = []
    for path in sorted([*(ROOT / "memory_pipelines").rglob("*.py"), *(ROOT / "assets").rglob("*.py")]):
        if path.parent == ROOT / "memory_pipelines" / "db":
            continue
        for call in _query_calls(path):
            name = call.args[0].value if call.args and isinstance(call.args[0], ast.Constant) else None
            if name is None or areas.get(name) != DUCKDB_AREA:
                outside.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    assert outside == []


def test_a_db_module_names_queries_of_its_own_area_or_runs_the_ones_it_is_given():
    areas = _areas()
    strays = []
    for path in sorted((ROOT / "memory_pipelines" / "db").glob("*.py")):
        for call in _query_calls(path):
            if call.args and isinstance(call.args[0], ast.Constant):
                area = areas.get(call.args[0].value)
                assert area is not None, f"{path.name}:{call.lineno} names no query"
                if area != path.stem and (path.name, area) != SCHEMA_RUNNER:
                    strays.append(f"{path.name}:{call.lineno} {call.args[0].value} ({area}.sql)")
    assert strays == [], strays

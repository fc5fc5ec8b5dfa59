"""The stages and their tests stand without Dagster: importing every module of
memory_pipelines/stages/ and tests/stages/ in a fresh interpreter loads no `dagster*` module."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import memory_pipelines.stages

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0].startswith("dagster"))))
"""


def stage_modules() -> list[str]:
    return ["memory_pipelines.stages", *(f"memory_pipelines.stages.{m.name}"
                                         for m in pkgutil.iter_modules(memory_pipelines.stages.__path__))]


def stage_test_modules() -> list[str]:
    return ["tests.stages", *(f"tests.stages.{m.name}" for m in pkgutil.iter_modules([str(Path(__file__).parent)]))]


def dagster_modules_loaded_by(names: list[str]) -> list[str]:
    result = subprocess.run([sys.executable, "-c", PROBE, *names], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_the_stages_and_their_tests_loads_no_dagster():
    stages, tests = stage_modules(), stage_test_modules()
    # every stage module and every test module here is imported
    assert {"memory_pipelines.stages.common", "memory_pipelines.stages.judging", "memory_pipelines.stages.transcripts",
            "memory_pipelines.stages.decay"} <= set(stages) and len(stages) >= 14
    assert {"tests.stages.conftest", "tests.stages.chain", "tests.stages.test_no_dagster",
            "tests.stages.test_transcripts", "tests.stages.test_decay"} <= set(tests)
    assert dagster_modules_loaded_by(stages + tests) == []


def test_the_probe_sees_dagster_where_it_is_loaded():
    # an asset module imports Dagster: the same probe must name it, or the test above proves nothing
    assert "dagster" in dagster_modules_loaded_by(["assets.resources"])


def test_no_module_here_imports_dagster_the_assets_or_the_dagster_test_helpers():
    imported = {}
    for path in sorted(Path(__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported.update({alias.name: path.name for alias in node.names})
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported[node.module] = path.name
    assert "memory_pipelines.stages.common" in imported  # the walk sees this folder's imports
    forbidden = {name: where for name, where in imported.items()
                 if name.split(".")[0].startswith("dagster") or name.split(".")[0] == "assets"
                 or name in ("tests.helpers", "tests.conftest")}  # both import Dagster
    assert forbidden == {}

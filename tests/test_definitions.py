"""The code location loads, validates, and the domain library stays free of Dagster."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import dagster as dg

import memory_pipelines

REPO = Path(__file__).resolve().parent.parent


def test_definitions_load_with_the_asset_graph():
    from assets.definitions import defs

    graph = defs.resolve_asset_graph()
    keys = {key.to_user_string() for key in graph.get_all_asset_keys()}
    assert "transcripts" in keys
    node = graph.get(dg.AssetKey("transcripts"))
    assert node.group_name == "ingestion"
    assert node.partitions_def is not None
    assert node.owners and node.description
    assert defs.resolve_job_def("distill") is not None
    assert set(defs.resources) >= {"postgres", "transcript_source"}


def test_dagster_definitions_validate_on_the_workspace():
    result = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Validation successful" in result.stdout + result.stderr


def test_domain_library_never_imports_dagster():
    modules = [m.name for m in pkgutil.walk_packages(memory_pipelines.__path__, "memory_pipelines.")]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "leaked = sorted(m for m in sys.modules if m == 'dagster' or m.startswith('dagster.'))\n"
        "print(len(leaked))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "memory_pipelines.cli" in modules and len(modules) > 5
    assert result.stdout.strip() == "0"

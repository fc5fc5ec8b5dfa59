"""The README's commands, CI and the wheel agree with each other."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    command = [line for line in ci if line.startswith("python3 -m venv")]
    assert len(command) == 1
    readme = (REPO / "README.md").read_text()
    assert command[0] in readme.splitlines()
    assert "pytest" in command[0]
    assert "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && memory-pipelines run" in readme


def test_wheel_carries_sql_samples_and_schema_and_finds_them(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = tmp_path.glob("memory_pipelines-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "memory_pipelines/_sql/migrations/0001_core.sql" in names
    assert "memory_pipelines/_sql/queries/transcript_scan.sql" in names
    assert "memory_pipelines/schemas/transcript_message.schema.json" in names
    assert "assets/definitions.py" in names and "assets/run/dagster_instance.yaml" in names
    assert any(n.startswith("memory_pipelines/sample_data/transcripts/") for n in names)
    target = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(target)
    probe = subprocess.run(
        [sys.executable, "-c", "from memory_pipelines.db.queries import sql_dir, query; "
         "print(sql_dir()); print(len(query('scan_records')) > 0)"],
        capture_output=True, text=True, cwd=tmp_path, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.splitlines() == [str(target / "memory_pipelines" / "_sql"), "True"]

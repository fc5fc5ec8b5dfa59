"""Each setting is declared once (its entry in SPECS; `Settings` is generated from it), no
module outside `memory_pipelines.config` reads a setting from the environment, and settings
reach the environment only to be handed to child processes (pure: reads the source)."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from memory_pipelines.config import SPECS, Settings, load

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "memory_pipelines" / "config.py"
# the one other write: Dagster's own variable, which its instance and the processes it starts read
DAGSTER_HOME_WRITE = (ROOT / "assets" / "run" / "runner.py", "DAGSTER_HOME")


def _modules() -> list[Path]:
    return sorted([*(ROOT / "memory_pipelines").rglob("*.py"), *(ROOT / "assets").rglob("*.py")])


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and ast.unparse(node.value) == "os"


def _setting_name(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and node.value in SPECS else None


def test_settings_has_one_field_per_declared_setting():
    assert [f.name for f in fields(Settings)] == [spec.field for spec in SPECS.values()]
    assert len({spec.field for spec in SPECS.values()}) == len(SPECS)
    defaults = load({})
    for spec in SPECS.values():
        if spec.name != "MEMORY_HOME":  # derived when unset: the default home
            assert getattr(defaults, spec.field) == spec.default, spec.name


def test_no_module_reads_a_setting_from_the_environment_but_config():
    readers = []
    for path in _modules():
        if path == CONFIG:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            read = None
            if isinstance(node, ast.Subscript) and _is_environ(node.value):
                read = _setting_name(node.slice)
            elif isinstance(node, ast.Call) and node.args and (
                    (isinstance(node.func, ast.Attribute) and _is_environ(node.func.value))
                    or ast.unparse(node.func) == "os.getenv"):
                read = _setting_name(node.args[0])
            if read:
                readers.append(f"{path.relative_to(ROOT)}:{node.lineno} {read}")
    assert readers == []


def test_only_the_hand_off_writes_the_environment():
    writes = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            target = None
            if isinstance(node, ast.Assign):
                target = next((t for t in node.targets if isinstance(t, ast.Subscript) and _is_environ(t.value)), None)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_environ(node.func.value) \
                    and node.func.attr in ("update", "pop", "__setitem__"):
                target = node
            if target is None:
                continue
            where = ast.unparse(target)
            if (path, "DAGSTER_HOME") == DAGSTER_HOME_WRITE and "DAGSTER_HOME" in where:
                continue
            writes.append((path.relative_to(ROOT).as_posix(), where))
    # `handed_off`: the settings in the environment while child processes start, restored after
    assert writes and {path for path, _ in writes} == {"memory_pipelines/config.py"}, writes
    source = ast.parse(CONFIG.read_text(encoding="utf-8"))
    hand_off = next(n for n in source.body if isinstance(n, ast.FunctionDef) and n.name == "handed_off")
    inside = {ast.unparse(n) for n in ast.walk(hand_off)}
    assert all(where in inside for _, where in writes), writes

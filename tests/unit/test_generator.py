"""The deterministic transcript generator."""

from __future__ import annotations

from datetime import UTC, datetime

from memory_pipelines.generator import GeneratorConfig, write_transcripts
from memory_pipelines.records import TimeWindow
from tests.helpers import scan_location


def _bytes(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_same_arguments_same_bytes_other_seed_other_bytes(tmp_path):
    config = GeneratorConfig(users=7, sessions=40, seed=3)
    write_transcripts(tmp_path / "a", config)
    write_transcripts(tmp_path / "b", config)
    write_transcripts(tmp_path / "c", GeneratorConfig(users=7, sessions=40, seed=4))
    assert _bytes(tmp_path / "a") == _bytes(tmp_path / "b")
    assert _bytes(tmp_path / "a") != _bytes(tmp_path / "c")


def test_generated_records_are_all_valid_and_counted(tmp_path):
    stats = write_transcripts(tmp_path, GeneratorConfig(users=5, sessions=30, seed=1, days=3))
    scan = scan_location(tmp_path, TimeWindow(datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)))
    assert scan.quarantined == ()
    assert len(scan.messages) == stats.messages
    assert len({m.session_id for m in scan.messages}) == 30
    assert len({m.user_id for m in scan.messages}) == 5
    assert any(m.metadata.get("is_error") for m in scan.messages)

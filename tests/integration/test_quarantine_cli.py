"""`memory-pipelines quarantine` end to end: refusals listed while open, resolved by the run
that stores their records, and the run's own output says how many it resolved."""

from __future__ import annotations

import json
import os

from tests.assets.test_quarantine_resolved import write_folder
from tests.integration.test_cli import cli


def test_the_run_given_the_missing_user_resolves_the_refusals_and_quarantine_lists_what_is_left(
        database_url, tmp_path):
    folder = tmp_path / "t"
    write_folder(folder)
    env = {k: v for k, v in os.environ.items() if k != "MEMORY_SOURCE_USER"}
    first = cli("run", "--transcripts", str(folder), env=env)
    assert first.returncode == 0, first.stderr
    assert "quarantine: 8 refusal(s) open, 0 resolved (0 by this run)" in first.stdout
    listed = cli("quarantine")
    assert listed.returncode == 0 and listed.stdout.splitlines()[0] == "8 refusal(s) open"

    second = cli("run", "--transcripts", str(folder), env={**env, "MEMORY_SOURCE_USER": "noor"})
    assert second.returncode == 0, second.stderr
    # the bad time in notes/ann.jsonl is not fixed here: it stays open, as the unknown role does
    assert "quarantine: 2 refusal(s) open, 6 resolved (6 by this run)" in second.stdout
    still = json.loads(cli("quarantine", "--json").stdout)
    assert sorted(r["reason"] for r in still) == ["invalid_timestamp", "unknown_role"]
    resolved = cli("quarantine", "--resolved")
    lines = resolved.stdout.splitlines()
    assert lines[0] == "6 refusal(s) resolved by a later run; 2 still open" and len(lines) == 7
    [run] = {line.rsplit(" by run ", 1)[1] for line in lines[1:]}
    assert all("  unmapped  " in line and "no user id" in line for line in lines[1:])
    assert {r["resolved_by_run"] for r in json.loads(cli("quarantine", "--resolved", "--json").stdout)} == {run}

"""MEMORY_CONTEXT_MESSAGES is one window: the messages `context_for` serves are the ones the
chunker leaves out of chunks, at the default and when it is moved."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import dagster as dg
import psycopg
import pytest

from assets.definitions import all_assets
from assets.resources import resources_from
from memory_pipelines.config import load
from memory_pipelines.session_context import context_for
from tests.helpers import QUIET

MESSAGES = 50
DAY = "2026-10-01"


def write_session(folder) -> None:
    """One session of 50 turns ending a minute before midnight: not stale at the day's end,
    so only what left the context window is chunked; a turn of 2,500 characters fills a chunk
    of its own, so the last chunk ends exactly where the window begins."""
    start = datetime(2026, 10, 1, 23, 9)
    lines = [json.dumps({"session_id": "s-long", "user_id": "ines", "seq": seq, "role": "user" if seq % 2 else "assistant",
                         "content": f"turn {seq} about the harbour migration plan step {seq} " + "detail " * 350,
                         "ts": (start + timedelta(minutes=seq)).isoformat() + "Z"})
             for seq in range(1, MESSAGES + 1)]
    (folder / "ines.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("window", [None, 32])
def test_the_context_window_and_the_chunker_move_together(window, database_url, tmp_path, monkeypatch):
    write_session(tmp_path)
    monkeypatch.setenv("MEMORY_TRANSCRIPTS", str(tmp_path))
    monkeypatch.setenv("MEMORY_EMBED_BACKEND", "hashing")
    if window is None:
        monkeypatch.delenv("MEMORY_CONTEXT_MESSAGES", raising=False)
    else:
        monkeypatch.setenv("MEMORY_CONTEXT_MESSAGES", str(window))
    expected = window or 16
    result = dg.materialize(all_assets, partition_key=DAY, resources=resources_from(load()),
                            instance=dg.DagsterInstance.ephemeral(), run_config=QUIET)
    assert result.success
    with psycopg.connect(database_url) as conn:
        [(chunked_through,)] = conn.execute("SELECT max(end_seq) FROM memory_chunks WHERE session_id = 's-long'")
        served = [m.seq for m in context_for(conn, "s-long", limit=load().context_messages).messages]
    assert served == list(range(MESSAGES - expected + 1, MESSAGES + 1))
    assert chunked_through == MESSAGES - expected, "chunks end where the context window begins"

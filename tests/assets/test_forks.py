"""Forked sessions on the branched sample (memory_pipelines/sample_data/branched): a fork is
distilled from its parent's state at the fork point and kept apart from the parent and the
user's memory; each merge mode leaves the parent with the tables of a transcript that held
the merged timeline from the start; replace sets turns aside and restore brings them back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import psycopg
import pytest

from assets.definitions import all_assets
from memory_pipelines.config import PACKAGE_DIR, load
from memory_pipelines.db import summaries as summaries_db
from memory_pipelines.forks import ForkError, fork_session, merge_fork, restore_merge
from memory_pipelines.lifecycle import forget
from memory_pipelines.llm import build_backend
from memory_pipelines.llm.config import chat_config
from memory_pipelines.search import UnifiedMemorySearch
from memory_pipelines.session_context import context_for
from tests.helpers import materialization_metadata, materialize_partitions

BRANCHED = PACKAGE_DIR / "sample_data" / "branched"
PARENT, FORK, DAY = "s-gina-0001", "s-gina-0001-fly", "2026-11-02"


def _distil(url: str, folder: Path):
    [result] = materialize_partitions(all_assets, [DAY], url, folder)
    return result


def _records(name: str) -> list[dict]:
    return [json.loads(line) for line in (BRANCHED / f"{name}.jsonl").read_text().splitlines()]


def _timeline_folder(tmp_path: Path, name: str, records: list[dict]) -> Path:
    """A transcript folder holding one session: the merged timeline written from the start."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / f"{PARENT}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def _as_parent(record: dict, seq: int) -> dict:
    return {k: v for k, v in record.items() if k not in ("parent_session_id", "fork_seq")} | {
        "session_id": PARENT, "seq": seq}


def _parent_tables(url: str) -> dict[str, list[tuple]]:
    """What the pipeline derived of the parent session (and the user's facts and knowledge),
    content and lineage only: ids, runs and times of writing may differ."""
    statements = {
        "summary_versions": "SELECT partition_key, step, step_count, kind, summary, cursor_seq, first_seq, last_seq, "
                            "messages_in FROM session_summary_versions WHERE session_id = %(s)s ORDER BY version",
        "summary": "SELECT summary, cursor_seq FROM session_summaries WHERE session_id = %(s)s",
        "segments": "SELECT start_seq, end_seq, is_noise, dropped FROM conversation_segments WHERE session_id = %(s)s "
                    "ORDER BY start_seq",
        "chunks": "SELECT start_seq, end_seq, content, breadcrumbs FROM memory_chunks WHERE session_id = %(s)s "
                  "ORDER BY start_seq",
        "turns": "SELECT seq, pos, role, body, keys FROM memory_turns WHERE session_id = %(s)s ORDER BY seq",
        "facts": "SELECT category, key, value, session_id, seq_start, seq_end FROM memory_facts "
                 "WHERE user_id = 'gina' AND merged_into IS NULL ORDER BY category, key",
        "knowledge": "SELECT kind, title, content, session_id, seq_start, seq_end FROM knowledge_entries "
                     "WHERE user_id = 'gina' ORDER BY kind, title",
        "tree": "SELECT node_key, level, summary FROM memory_tree WHERE tree_key = %(s)s ORDER BY node_key",
    }
    with psycopg.connect(url) as conn:
        return {name: conn.execute(sql, {"s": PARENT}).fetchall() for name, sql in statements.items()}


def _served(url: str, text: str, **options) -> list:
    with psycopg.connect(url) as conn:
        return UnifiedMemorySearch(conn).search(text, "raw", k=10, user_id="gina", **options)


@pytest.fixture
def branched(make_database, tmp_path) -> tuple[str, Path]:
    """The branched sample distilled: the parent, and its fork after turn 6."""
    folder = tmp_path / "branched"
    shutil.copytree(BRANCHED, folder)
    url = make_database()
    _distil(url, folder)
    return url, folder


def test_a_fork_starts_from_its_parents_state_and_stays_apart(branched):
    url, _ = branched
    with psycopg.connect(url) as conn:
        forks = conn.execute("SELECT session_id, parent_session_id, fork_seq, created_by FROM session_forks").fetchall()
        assert forks == [(FORK, PARENT, 6, "transcript")]
        parent, fork = (conn.execute("SELECT summary::text FROM session_summaries WHERE session_id = %s",
                                     [s]).fetchone()[0] for s in (PARENT, FORK))
        # the fork's summary starts from the shared turns (port 7070), then its own; never the parent's later ones
        assert "7070" in fork and "Fly.io" in fork and "Kubernetes" not in fork
        assert "Kubernetes" in parent and "Fly.io" not in parent
        assert conn.execute("SELECT min(start_seq) FROM memory_chunks WHERE session_id = %s", [FORK]).fetchone()[0] == 7
        # the user's memory holds nothing of the fork until a merge
        for table in ("memory_facts", "knowledge_entries"):
            assert conn.execute(f"SELECT count(*) FROM {table} WHERE user_id = 'gina'").fetchone()[0] > 0
            assert conn.execute(f"SELECT count(*) FROM {table} WHERE session_id = %s", [FORK]).fetchone()[0] == 0
        deploy = conn.execute("SELECT value FROM memory_facts WHERE key = 'billing_worker_deploy_target'").fetchone()
        assert deploy == ("Kubernetes",)
        scene = conn.execute("SELECT node_key FROM memory_tree WHERE tree_kind = 'scene' AND level = 0").fetchall()
        assert scene == [(f"session:{PARENT}",)]
    # asked for, the fork's turns are found and labelled; by default they are not served
    with_forks = _served(url, "Fly.io volume billing_data SQLite", include_forks=True)
    assert with_forks and with_forks[0].session_id == FORK and with_forks[0].fork.parent_session_id == PARENT
    assert all(h.session_id != FORK for h in _served(url, "Fly.io volume billing_data SQLite"))
    with psycopg.connect(url) as conn:  # the chunk index keeps forks apart the same way
        chunks = UnifiedMemorySearch(conn).search_chunks("billing-worker 7070 volume", "gina", mode="text")
        assert chunks and FORK not in {h.session_id for h in chunks}
        assert FORK in {h.session_id for h in UnifiedMemorySearch(conn).search_chunks(
            "billing-worker 7070 volume", "gina", mode="text", include_forks=True)}
    named = _served(url, "Fly.io volume", session_id=FORK)
    assert named and {h.session_id for h in named} == {FORK} and named[0].fork.fork_seq == 6
    # a fork's context is its timeline: the shared turns, then its own, never the parent's later ones
    with psycopg.connect(url) as conn:
        context = context_for(conn, FORK)
        assert [(m.session_id, m.seq) for m in context.messages] == [(PARENT, s) for s in range(1, 7)] + [
            (FORK, s) for s in range(7, 11)]
        fresh = fork_session(conn, PARENT, "s-gina-0001-b", 3, actor="test")
        early = context_for(conn, fresh.session_id)
        assert [m.seq for m in early.messages] == [1, 2, 3] and early.summary is None  # no parent version before 3
        # the parent's context names its forks only when asked, labelled as other branches
        assert context_for(conn, PARENT).forks == () and "Forks of this session" not in json.dumps(
            context_for(conn, PARENT).chat_messages("hi"))
        branches = context_for(conn, PARENT, include_forks=True)
        assert [(n.fork.session_id, n.fork.fork_seq) for n in branches.forks] == [(FORK, 6), ("s-gina-0001-b", 3)]
        assert "Fly volume billing_data" in branches.forks[0].current and branches.forks[1].current == ""
        block = branches.chat_messages("what next?")[-1]["content"]
        assert "Forks of this session (other branches, not this conversation):" in block
        assert f"- {FORK} (fork after turn 6): " in block and "- s-gina-0001-b (fork after turn 3): not summarized yet" in block


def test_merge_append_gives_the_tables_of_the_timeline_held_from_the_start(branched, make_database, tmp_path):
    url, folder = branched
    before = _parent_tables(url)
    with psycopg.connect(url) as conn:
        dry = merge_fork(conn, FORK, PARENT, "append", actor="test", dry_run=True)
        assert dry.dry_run and [m.seq for m in dry.written] == [11, 12, 13, 14]
        assert conn.execute("SELECT count(*) FROM session_merges").fetchone()[0] == 0
        report = merge_fork(conn, FORK, PARENT, "append", actor="test")
        merge = report.merge
        assert (merge.mode, merge.parent_first_seq, merge.parent_last_seq, merge.first_changed_day) == (
            "append", 11, 14, DAY)
        lineage = conn.execute("SELECT seq, metadata -> 'merged_from' FROM messages WHERE session_id = %s AND seq > 10 "
                               "ORDER BY seq", [PARENT]).fetchall()
        assert [(s, m["session_id"], m["seqs"]) for s, m in lineage] == [(11 + i, FORK, [7 + i]) for i in range(4)]
        # merging twice does nothing
        again = merge_fork(conn, FORK, PARENT, "append", actor="test")
        assert again.already and again.merge.id == merge.id
        assert conn.execute("SELECT count(*) FROM messages WHERE session_id = %s", [PARENT]).fetchone()[0] == 14
    _distil(url, folder)
    merged = _parent_tables(url)
    assert merged != before
    assert "Fly.io" in json.dumps(merged["summary"]) and ("Fly.io",) in [
        (v,) for _, k, v, *_ in merged["facts"] if k == "billing_worker_deploy_target"]
    reference = make_database()
    timeline = _records(PARENT) + [_as_parent(r, 4 + r["seq"]) for r in _records(FORK)]
    _distil(reference, _timeline_folder(tmp_path, "appended", timeline))
    assert merged == _parent_tables(reference)


def test_merge_replace_sets_the_later_turns_aside_and_restore_brings_them_back(branched, make_database, tmp_path):
    url, folder = branched
    before = _parent_tables(url)
    assert any(h.session_id == PARENT and h.end_seq >= 7 for h in _served(url, "Kubernetes helm chart"))
    with psycopg.connect(url) as conn:
        report = merge_fork(conn, FORK, PARENT, "replace", actor="test")
        assert report.superseded == 4 and (report.merge.superseded_first_seq, report.merge.superseded_last_seq) == (7, 10)
        assert conn.execute("SELECT count(*) FROM superseded_messages").fetchone()[0] == 4
    # out of search at once, before the next run
    assert not any(h.session_id == PARENT for h in _served(url, "Kubernetes helm chart"))
    result = _distil(url, folder)
    ingest = materialization_metadata(result, "transcripts")
    assert ingest["superseded"] == 4 and ingest["quarantined"] == 0  # the re-sent parent turns stay aside
    replaced = _parent_tables(url)
    assert "Kubernetes" not in json.dumps(replaced["summary"]) and "Fly.io" in json.dumps(replaced["summary"])
    reference = make_database()
    _distil(reference, _timeline_folder(tmp_path, "replaced", [r for r in _records(PARENT) if r["seq"] <= 6] + [
        _as_parent(r, r["seq"]) for r in _records(FORK)]))
    assert replaced == _parent_tables(reference)
    with psycopg.connect(url) as conn:
        restored = restore_merge(conn, FORK, PARENT, actor="test")
        assert (restored.removed, restored.brought_back) == (4, 4)
        with pytest.raises(ForkError, match="no merge of .* is in force"):
            restore_merge(conn, FORK, PARENT)
    _distil(url, folder)
    back = _parent_tables(url)
    assert back["summary"] == before["summary"] and back["chunks"] == before["chunks"]
    assert back["turns"] == before["turns"] and back["summary_versions"] == before["summary_versions"]
    assert any(h.session_id == PARENT and h.end_seq >= 7 for h in _served(url, "Kubernetes helm chart"))


def test_merge_summarize_appends_one_turn_condensing_the_fork_with_lineage_to_each(branched, make_database, tmp_path):
    url, folder = branched
    writer = build_backend(chat_config(load()))  # the tests' default: the rules back end
    assert writer.name == "rules"
    with psycopg.connect(url) as conn:
        report = merge_fork(conn, FORK, PARENT, "summarize", actor="test", writer=writer)
        [turn] = report.written
        assert turn.seq == 11 and "Fly.io" in turn.content and turn.metadata["merged_from"]["seqs"] == [7, 8, 9, 10]
        calls = conn.execute("SELECT asset, purpose, session_id FROM llm_calls WHERE run_id = %s",
                             [f"merge-{report.merge.id}"]).fetchall()
        assert calls == [("session_merges", "summarize", PARENT)]
    _distil(url, folder)
    summarized = _parent_tables(url)
    reference = make_database()
    _distil(reference, _timeline_folder(tmp_path, "summarized", _records(PARENT) + [
        {**_records(PARENT)[-1], "seq": 11, "role": "assistant", "content": turn.content, "ts": turn.ts.isoformat(),
         "metadata": turn.metadata}]))
    assert summarized == _parent_tables(reference)


def test_fork_and_merge_name_what_to_fix(branched):
    url, _ = branched
    with psycopg.connect(url) as conn:
        with pytest.raises(ForkError, match="no session 'nope'"):
            fork_session(conn, "nope", "x")
        with pytest.raises(ForkError, match="is itself a fork"):
            fork_session(conn, FORK, "x")
        with pytest.raises(ForkError, match="already exists"):
            fork_session(conn, PARENT, FORK)
        with pytest.raises(ForkError, match=r"--at 40 is outside s-gina-0001's turns 1\.\.10"):
            fork_session(conn, PARENT, "x", 40)
        made = fork_session(conn, PARENT, "s-gina-0001-alt", 3, actor="test")
        assert (made.parent_session_id, made.fork_seq, made.user_id) == (PARENT, 3, "gina")
        with pytest.raises(ForkError, match="has no turns of its own yet"):
            merge_fork(conn, "s-gina-0001-alt", PARENT, "append")
        with pytest.raises(ForkError, match="it is no fork"):
            merge_fork(conn, PARENT, FORK, "append")
        with pytest.raises(ForkError, match="unknown merge mode 'squash'"):
            merge_fork(conn, FORK, PARENT, "squash")
        assert conn.execute("SELECT count(*) FROM session_merges").fetchone()[0] == 0


def test_forgetting_a_parent_takes_its_forks_merges_and_set_aside_turns(branched):
    url, _ = branched
    with psycopg.connect(url) as conn:
        merge_fork(conn, FORK, PARENT, "replace", actor="test")
        tables = ("session_forks", "session_merges", "superseded_messages")
        assert [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables] == [1, 1, 4]  # noqa: S608
        removed = forget(conn, "gina", PARENT)
        assert removed["superseded_messages"] == 4 and removed["session_forks"] == 1
        assert [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables] == [0, 0, 0]  # noqa: S608
        assert conn.execute("SELECT count(*) FROM messages WHERE session_id IN (%s, %s)",
                            [PARENT, FORK]).fetchone()[0] == 0


def test_a_fork_after_a_parents_summarized_day_starts_from_that_version(make_database, tmp_path):
    folder = tmp_path / "two-days"
    folder.mkdir()
    # the shared turns a day earlier: the parent's first day's version ends at the fork point
    shared = [{**r, "ts": r["ts"].replace("2026-11-02", "2026-11-01")} for r in _records(PARENT) if r["seq"] <= 6]
    (folder / "parent.jsonl").write_text("".join(json.dumps(r) + "\n" for r in shared + [
        r for r in _records(PARENT) if r["seq"] > 6]))
    (folder / "fork.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _records(FORK)))
    url = make_database()
    materialize_partitions(all_assets, ["2026-11-01", DAY], url, folder)
    with psycopg.connect(url) as conn:
        seed = conn.execute("SELECT version, cursor_seq, summary::text FROM session_summary_versions "
                            "WHERE session_id = %s AND partition_key = '2026-11-01'", [PARENT]).fetchone()
        assert seed[1] == 6 and "7070" in seed[2]
        [(version, first_seq, last_seq, summary)] = conn.execute(
            "SELECT version, first_seq, last_seq, summary::text FROM session_summary_versions WHERE session_id = %s",
            [FORK]).fetchall()
        # its own count from 1, its fold reading its own turns on top of the parent's day-one summary
        assert (version, first_seq, last_seq) == (1, 7, 10) and "7070" in summary and "Fly.io" in summary
        assert "Kubernetes" not in summary
        assert summaries_db.current_summary(conn, "s-gina-0001-b") is None  # not a fork, not stored
        fork_session(conn, PARENT, "s-gina-0001-b", 8, actor="test")
        assert "7070" in json.dumps(summaries_db.current_summary(conn, "s-gina-0001-b").to_json())

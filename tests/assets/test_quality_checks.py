"""Data-quality checks of every stage against the real database: all pass on the sample
run, each fails on a corrupted row with a summary naming it, and a failed blocking check
stops the downstream asset in the same run."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import pandas as pd
import psycopg
import pytest

from assets.definitions import all_assets
from assets.distillation import conversation_segments
from assets.ingestion import transcripts
from memory_pipelines.quality_gates.catalogue import CHECKS, run_checks
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.embed import EmbedConfig, build_embedder
from memory_pipelines.shards import ALL_USERS
from memory_pipelines.stages.embeddings import EMBEDDED_TABLES
from memory_pipelines.quality_gates.expectations import validate_frame
from tests.conftest import TEMPLATE_DB, _admin
from tests.helpers import EAGER_DECAY, materialize_partitions, materialize_range, pipeline_resources, with_database

DAYS = [(date(2026, 10, 1) + timedelta(days=i)).isoformat() for i in range(14)]
RUN_ID = "quality-test-run"
EMBEDDER = build_embedder(EmbedConfig())  # the embedder the test resources configure


@pytest.fixture(scope="module")
def sample(pg_admin_url):
    """The whole sample materialized once: the first 13 days in one run (as a UI backfill
    does), then the last day in a run of its own (as the schedule does). Yields the
    database and each run's check evaluations; tests that corrupt rows roll them back."""
    name = "quality_sample"
    _admin(pg_admin_url, "DROP DATABASE IF EXISTS {} WITH (FORCE)", name)
    _admin(pg_admin_url, "CREATE DATABASE {} TEMPLATE {}", name, TEMPLATE_DB)
    url = with_database(pg_admin_url, name)
    resources = pipeline_resources(url, SAMPLE_TRANSCRIPTS, lifecycle=EAGER_DECAY)  # the archive gets rows
    backfill = materialize_range(all_assets, DAYS[0], DAYS[-2], resources, raise_on_error=False)
    [last_day] = materialize_partitions(all_assets, DAYS[-1:], url, SAMPLE_TRANSCRIPTS, expect_success=False,
                                        resources=resources)
    yield url, {"backfill": backfill.get_asset_check_evaluations(), "last day": last_day.get_asset_check_evaluations()}
    from memory_pipelines.db.connection import close_pools

    close_pools()
    _admin(pg_admin_url, "DROP DATABASE IF EXISTS {} WITH (FORCE)", name)


@pytest.mark.parametrize("run", ["backfill", "last day"])
def test_every_check_runs_and_passes_on_the_sample(sample, run):
    evaluations = sample[1][run]
    declared = {(asset, c.name) for asset, checks in CHECKS.items() for c in checks}
    assert {(e.asset_key.to_user_string(), e.check_name) for e in evaluations} == declared
    assert [e.metadata["summary"].value for e in evaluations if not e.passed] == []
    empty = [e.check_name for e in evaluations if e.metadata["rows_checked"].value == 0]
    if run == "backfill":
        # the sample quarantines nothing, and a run archives nothing it stored itself (issue 37);
        # every other check had rows in scope
        assert empty == ["quarantine_valid", "archive_valid"]
    else:  # the next run archives what the backfill stored and eager decay lets go
        assert "archive_valid" not in empty


def range_scope(conn) -> dict:
    """What the assets bind for a one-run backfill of the whole sample, with every session
    and user counted as written (as the transcripts, facts and chunks assets report them)."""
    start = datetime.fromisoformat(DAYS[0]).replace(tzinfo=UTC)
    sessions, users = conn.execute("SELECT array_agg(session_id), array_agg(DISTINCT user_id) FROM sessions").fetchone()
    return {"partition_keys": DAYS, "start": start, "end": start + timedelta(days=len(DAYS)), "run_id": RUN_ID,
            "partition_label": f"{DAYS[0]}..{DAYS[-1]}", "session_ids": sessions, "user_ids": users,
            "model": EMBEDDER.model_id, "dimension": EMBEDDER.dimension, **{table: [] for table in EMBEDDED_TABLES},
            **ALL_USERS.params}


def evaluate(conn, asset: str) -> dict[str, str]:
    """Each check of the asset over the range: its summary if it failed."""
    return {check.name: outcome.summary for check, outcome in run_checks(conn, CHECKS[asset], range_scope(conn))
            if not outcome.passed}


def test_every_check_passes_over_a_whole_range_scope(sample):
    with psycopg.connect(sample[0]) as conn:
        assert {asset: evaluate(conn, asset) for asset in CHECKS} == {asset: {} for asset in CHECKS}


# (asset, check, a statement corrupting one row and returning its label, what the summary says)
CORRUPTIONS = [
    ("transcripts", "messages_valid",  # written by this run, outside the window
     "UPDATE messages SET ts = ts - interval '30 days', ingested_run_id = %(run_id)s WHERE (session_id, seq) = "
     "(SELECT session_id, min(seq) FROM messages GROUP BY 1 ORDER BY 1 LIMIT 1) RETURNING session_id || '/' || seq",
     "in_window holds: 1 of"),
    ("transcripts", "sessions_single_user",
     "UPDATE messages SET user_id = 'mallory' WHERE (session_id, seq) = "
     "(SELECT session_id, max(seq) FROM messages GROUP BY 1 ORDER BY 1 LIMIT 1) RETURNING session_id",
     "single_user holds: 1 of"),
    ("transcripts", "sessions_match_messages",
     "UPDATE sessions SET message_count = message_count + 1 WHERE session_id = (SELECT min(session_id) FROM sessions) "
     "RETURNING session_id",
     "counts_match holds: 1 of"),
    ("transcripts", "quarantine_valid",
     "INSERT INTO quarantine (source_file, source_line, reason, detail, raw, raw_bytes, partition_key, run_id) "
     "VALUES ('alice/x.jsonl', 7, 'gremlins', 'd', '{}', 2, %(partition_label)s, 'r') "
     "RETURNING source_file || '/' || source_line",
     "(reason='gremlins')"),
    ("conversation_segments", "segments_valid",
     "UPDATE conversation_segments SET dropped = true, is_noise = true, noise_reason = NULL "
     "WHERE segment_id = (SELECT min(segment_id) FROM conversation_segments WHERE NOT dropped) RETURNING segment_id",
     "dropped_with_reason holds: 1 of"),
    ("conversation_segments", "segments_valid",
     "UPDATE conversation_segments SET user_id = 'mallory' "
     "WHERE segment_id = (SELECT min(segment_id) FROM conversation_segments) RETURNING segment_id",
     "single_user holds: 1 of"),
    ("session_summaries", "summaries_valid",
     "UPDATE session_summaries SET summary = summary - 'keys' "
     "WHERE session_id = (SELECT min(session_id) FROM session_summaries) RETURNING session_id",
     "summary has the expected JSON shape: 1 of"),
    ("session_summaries", "summary_versions_valid",
     "UPDATE session_summary_versions SET cursor_seq = cursor_seq + 1000 WHERE (session_id, version) = "
     "(SELECT session_id, version FROM session_summary_versions ORDER BY 1, 2 LIMIT 1) "
     "RETURNING session_id || '/' || version",
     "cursor_in_session holds: 1 of"),
    ("memory_facts", "facts_valid",  # a fact attributed to another user's session
     "UPDATE memory_facts f SET session_id = (SELECT min(s.session_id) FROM sessions s WHERE s.user_id <> f.user_id) "
     "WHERE f.id = (SELECT min(id) FROM memory_facts) RETURNING f.id::text",
     "same_user holds: 1 of"),
    ("memory_chunks", "chunks_valid",
     "UPDATE memory_chunks SET user_id = 'mallory' WHERE id = (SELECT min(id) FROM memory_chunks) RETURNING id::text",
     "same_user holds: 1 of"),
    ("memory_chunks", "chunk_sizes",
     "UPDATE memory_chunks SET content = repeat('x', 20000) WHERE id = (SELECT min(id) FROM memory_chunks) "
     "RETURNING id::text",
     "within_cap holds: 1 of"),
    ("sketches", "sketches_valid",
     "UPDATE sketches SET user_id = 'mallory' WHERE id = (SELECT min(id) FROM sketches) RETURNING id::text",
     "written_by_user holds: 1 of"),
    ("knowledge_entries", "entries_valid",
     "UPDATE knowledge_entries SET scope_id = 'someone-else' "
     "WHERE id = (SELECT min(id) FROM knowledge_entries WHERE scope = 'entity') RETURNING id::text",
     "scope_id_matches holds: 1 of"),
    ("entity_graph", "graph_valid",  # a closed triple moved to another user: its closer is not theirs
     "UPDATE entity_graph SET user_id = 'mallory' "
     "WHERE id = (SELECT min(id) FROM entity_graph WHERE closed_by IS NOT NULL) RETURNING id::text",
     "closed_by_same_user holds: 1 of"),
    ("error_memory", "errors_valid",
     "UPDATE error_memory SET fix = '  ' WHERE id = (SELECT min(id) FROM error_memory) RETURNING id::text",
     "texts_present holds: 1 of"),
    ("memory_tree", "tree_valid",  # a leaf lifted above its parent
     "UPDATE memory_tree SET level = level + 5 WHERE (tree_kind, tree_key, node_key) = (SELECT tree_kind, tree_key, "
     "node_key FROM memory_tree WHERE level = 0 AND parent_key IS NOT NULL ORDER BY 1, 2, 3 LIMIT 1) "
     "RETURNING tree_kind || '/' || tree_key || '/' || node_key",
     "parent_above holds: 1 of"),
    ("memory_tree", "tree_valid",  # a scene node spanning another user's session
     "UPDATE memory_tree t SET spans = jsonb_build_array(jsonb_build_object('session_id', (SELECT min(s.session_id) "
     "FROM sessions s WHERE s.user_id <> t.user_id), 'seq_start', 1, 'seq_end', 1)) WHERE (tree_kind, tree_key, "
     "node_key) = (SELECT tree_kind, tree_key, node_key FROM memory_tree WHERE tree_kind = 'scene' ORDER BY 2, 3 "
     "LIMIT 1) RETURNING tree_kind || '/' || tree_key || '/' || node_key",
     "spans_of_user holds: 1 of"),
    ("memory_embeddings", "embeddings_current",  # another model's vector (outside the current model's index)
     "UPDATE memory_chunks SET embedding = '[1,2,3]', embedding_model = 'hashing:hashing-v0:3' "
     "WHERE id = (SELECT min(id) FROM memory_chunks) RETURNING 'memory_chunks/' || id",
     "dimension equals current_dimension: 1 of"),
    ("memory_decay", "archive_valid",
     "UPDATE memory_archive SET source_id = source_id + 1000000 WHERE id = (SELECT min(id) FROM memory_archive) "
     "RETURNING source_table || '/' || source_id",
     "row_matches_source holds: 1 of"),
]


@pytest.mark.parametrize(("asset", "check", "corruption", "expected"), CORRUPTIONS,
                         ids=[f"{c[1]}-{c[3].split()[0]}" for c in CORRUPTIONS])
def test_a_corrupted_row_fails_its_check_with_a_summary_naming_it(sample, asset, check, corruption, expected):
    with psycopg.connect(sample[0]) as conn:
        try:
            [(label,)] = conn.execute(corruption, range_scope(conn)).fetchall()
            failed = evaluate(conn, asset)
        finally:
            conn.rollback()  # the module's database stays as the sample run left it
    assert check in failed, failed
    assert expected in failed[check] and f"e.g. {label}" in failed[check], failed[check]


def test_constraint_backed_expectations_fail_on_a_bad_frame():
    """What the schema already forbids (duplicate keys, unknown roles) cannot be written to
    the database: the expectations are shown failing on a frame instead."""
    [messages_valid] = [c for c in CHECKS["transcripts"] if c.name == "messages_valid"]
    frame = pd.DataFrame({
        "session_id": ["s1", "s1", "s2"], "seq": [1, 1, 1], "user_id": ["ann", "ann", None],
        "role": ["user", "robot", "user"], "source_file": ["a.jsonl"] * 3, "source_line": [1, 2, 3],
        "ingested_run_id": ["r"] * 3, "content_hash": ["h"] * 3, "in_window": [True] * 3})
    outcome = validate_frame("messages_valid", frame, messages_valid.expectations, messages_valid.key)
    assert not outcome.passed
    assert outcome.failures == (
        "(session_id, seq) is unique: 2 of 3 rows fail, e.g. s1/1; s1/1",
        "role in {user, assistant, tool, system}: 1 of 3 rows fail, e.g. s1/1 (role='robot')",
        "user_id is never null: 1 of 3 rows fail, e.g. s2/1 (user_id=None)",
    )


def test_the_json_shape_expectation_names_why_each_row_fails_and_leaves_nulls_to_not_null():
    [summaries_valid] = [c for c in CHECKS["session_summaries"] if c.name == "summaries_valid"]
    [shape] = [spec for spec in summaries_valid.expectations if spec[0] == "json_schema"]
    good = {"key_decisions": ["Do: use 9090"], "past_discussions": [], "current_discussion": "", "keys": [],
            "language": "en"}
    frame = pd.DataFrame({"session_id": ["s1", "s2", "s3", "s4", "s5"], "summary": [
        json.dumps(good), json.dumps({**good, "key_decisions": ["use 9090"]}), "{not json", None,
        json.dumps({k: v for k, v in good.items() if k != "keys"})]})
    outcome = validate_frame("summaries_valid", frame, [shape], ["session_id"])
    assert outcome.failures == (
        "summary has the expected JSON shape: 3 of 5 rows fail, e.g. s2 ('use 9090' does not match "
        "\"^(Do|Don't): \"); s3 (not JSON: Expecting property name enclosed in double quotes: line 1 column 2 "
        "(c…); s5 ('keys' is a required property)",)


def write_session(folder, session_id, user_id, turns, day="2026-10-01"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{session_id}.jsonl").write_text("".join(
        json.dumps({"session_id": session_id, "user_id": user_id, "seq": seq, "role": role, "content": content,
                    "ts": f"{day}T10:{seq:02d}:00Z"}) + "\n"
        for seq, (role, content) in enumerate(turns, start=1)))


def test_a_failed_blocking_check_stops_the_downstream_asset_in_the_same_run(database_url, tmp_path):
    write_session(tmp_path, "s1", "ann", [("user", "I prefer vim as my editor"), ("assistant", "ok")])
    write_session(tmp_path, "s2", "ann", [("robot", "beep")])  # quarantined: an unknown role
    [first] = materialize_partitions([transcripts], ["2026-10-01"], database_url, tmp_path)
    [quarantine] = [e for e in first.get_asset_check_evaluations() if e.check_name == "quarantine_valid"]
    assert quarantine.passed and quarantine.metadata["rows_checked"].value == 1
    with psycopg.connect(database_url) as conn:  # a message of ann's session now says it is mallory's
        conn.execute("UPDATE messages SET user_id = 'mallory' WHERE session_id = 's1' AND seq = 2")
    [result] = materialize_partitions([transcripts, conversation_segments], ["2026-10-01"], database_url, tmp_path,
                                      expect_success=False)
    assert not result.success
    evaluations = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert not evaluations["sessions_single_user"].passed
    assert evaluations["sessions_single_user"].metadata["summary"].value.endswith(
        "single_user holds: 1 of 1 rows fail, e.g. s1")
    assert result.get_failed_step_keys() == {"transcripts"}
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert materialized == {"transcripts"} and not result.is_node_success("conversation_segments")
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT count(*) FROM conversation_segments").fetchone()[0] == 0


def test_checks_read_in_small_frames_find_what_one_frame_finds(sample, monkeypatch):
    from memory_pipelines.db import checks as checks_db
    from memory_pipelines.quality_gates import catalogue

    with psycopg.connect(sample[0]) as conn:
        scope = {**catalogue.QUERY_CONSTANTS, **range_scope(conn)}
        frames = list(checks_db.check_frames(conn, "message_check_rows", scope, ("session_id",), 5))
        whole = checks_db.check_frame(conn, "message_check_rows", scope)
        # several frames, every row once, no session cut in two
        assert len(frames) > 3 and sum(len(f) for f in frames) == len(whole)
        assert all(set(a["session_id"]).isdisjoint(b["session_id"]) for a, b in zip(frames, frames[1:]))
        # with nothing to keep together, frames are cut at the size
        anywhere = list(checks_db.check_frames(conn, "message_check_rows", scope, (), 5))
        assert [len(f) for f in anywhere[:-1]] == [5] * (len(anywhere) - 1) and sum(map(len, anywhere)) == len(whole)
        summaries = {asset: [o.summary for _, o in run_checks(conn, CHECKS[asset], range_scope(conn))]
                     for asset in CHECKS}
        monkeypatch.setattr(catalogue, "CHECK_FRAME_ROWS", 5)
        assert {asset: [o.summary for _, o in run_checks(conn, CHECKS[asset], range_scope(conn))]
                for asset in CHECKS} == summaries
    # a fact check's unique columns decide where its rows may be cut; a check without one
    # is cut anywhere; a check whose unique columns share none is not cut
    facts = [c for c in CHECKS["memory_facts"] if c.rows == "fact_check_rows"]
    assert catalogue.frame_columns(facts) == ("user_id", "category", "key")
    assert catalogue.frame_columns(CHECKS["memory_embeddings"]) == ()
    odd = catalogue.QualityCheck("x", "q", ("id",), (("unique", ("a",)), ("unique", ("b",))), False, "")
    assert catalogue.frame_columns([odd]) is None

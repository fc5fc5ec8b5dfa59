"""A year of generated history through the pipeline with default decay: only memory old
enough and unaccessed that long is archived, never a newer statement about a subject while
an older one stays, and facts are not decayed at all."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

import dagster as dg
import psycopg
import pytest
from psycopg.rows import dict_row

from assets.distillation import conversation_segments, session_summaries
from assets.ingestion import transcripts
from assets.knowledge import knowledge_entries, memory_decay
from assets.memory import memory_facts
from memory_pipelines.db.queries import query
from memory_pipelines.generator import GeneratorConfig, write_transcripts
from memory_pipelines.core.knowledge_entries import Triple, states
from tests.helpers import location_days, materialize_partitions

# what decay reads; chunks, sketches, error memory and embeddings play no part in it
ASSETS = [transcripts, conversation_segments, session_summaries, memory_facts, knowledge_entries, memory_decay]
MIN_AGE = timedelta(days=90)


def _session(session_id: str, day: str, request: str) -> list[dict]:
    return [{"session_id": session_id, "user_id": PINNED_USER, "seq": seq, "role": role, "content": text,
             "ts": f"{day}T10:0{seq}:00Z"}
            for seq, (role, text) in enumerate([("user", request), ("assistant", "Agreed, noted.")], start=1)]


# Beside the generated year, one user whose older statement stays in use: ledger-api moves from
# port 7001 (Jan 5) to 7002 (Feb 4); the 7001 instruction is searched on Mar 6, so it is kept
# until Jun 4. The 7002 statements are 90 days old on May 5, unaccessed: on May 20 decay
# must keep them anyway, and may take them once the 7001 one goes (by Jun 10).
PINNED_USER = "user-pinned"
PINNED = [
    ("p-1", "2026-01-05", "Let's run ledger-api on port 7001 from now on."),
    ("p-2", "2026-02-04", "Let's run ledger-api on port 7002 from now on."),
    ("p-3", "2026-05-20", "What is on the agenda today?"),
    ("p-4", "2026-06-10", "Anything new since last time?"),
]
PINNED_ACCESS = datetime(2026, 3, 6, 12, tzinfo=UTC)


@pytest.mark.slow
def test_a_year_of_history_decays_only_old_unaccessed_memory_and_newest_statements_last(database_url, tmp_path):
    folder = tmp_path / "year"
    write_transcripts(folder, GeneratorConfig(users=4, sessions=40, seed=7, start=date(2025, 10, 1), days=365))
    (folder / "pinned.jsonl").write_text("".join(json.dumps(r) + "\n" for p in PINNED for r in _session(*p)))
    days = [d.isoformat() for d in location_days(folder)]
    assert len(days) > 30 and date.fromisoformat(days[-1]) - date.fromisoformat(days[0]) > timedelta(days=300)
    instance = dg.DagsterInstance.ephemeral()
    materialize_partitions(ASSETS, [d for d in days if d <= "2026-03-06"], database_url, folder, instance=instance)
    with psycopg.connect(database_url) as conn:
        accessed = {r[0] for r in conn.execute(
            "UPDATE knowledge_entries SET last_accessed_at = %s, access_count = access_count + 1 "
            "WHERE user_id = %s AND content LIKE '%%7001%%' RETURNING entry_key", (PINNED_ACCESS, PINNED_USER))}
    assert len(accessed) == 1
    later = materialize_partitions(ASSETS, [d for d in days if d > "2026-03-06"], database_url, folder,
                                   instance=instance)
    kept_for_older = {r.asset_materializations_for_node("memory_decay")[0].metadata["as_of"].value[:10]:
                      r.asset_materializations_for_node("memory_decay")[0].metadata["kept_by_reason"].value.get(
                          "knowledge_entries:older_statement_kept", 0) for r in later}
    assert kept_for_older["2026-05-20"] >= 2  # the 7002 instruction and the "ledger-api port" entry

    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        archived = conn.execute("SELECT source_table, source_key, reason, as_of, row_data FROM memory_archive").fetchall()
        live = conn.execute("SELECT entry_key, user_id, title || ' ' || content AS text, updated_at, id "
                            "FROM knowledge_entries").fetchall()
        triples = [Triple(**r) for r in conn.execute(query("graph_statements"), {"all_users": True, "user_ids": []})]
        facts = conn.execute("SELECT count(*) AS n FROM memory_facts").fetchone()["n"]
    decayed = [a for a in archived if a["reason"] == "decayed"]
    assert decayed and live and facts, "a year must leave memory both archived and kept"
    assert {a["source_table"] for a in archived} <= {"knowledge_entries", "error_memory"}  # facts do not decay

    for a in decayed:
        row = a["row_data"]
        seen = _moment(row["updated_at"])
        assert a["as_of"] - seen >= MIN_AGE, (a["source_key"], seen, a["as_of"])
        if row["last_accessed_at"] is not None:
            assert a["as_of"] - _moment(row["last_accessed_at"]) >= MIN_AGE, a["source_key"]
        if a["source_key"] in accessed:
            assert a["as_of"] >= PINNED_ACCESS + MIN_AGE
    pinned = sorted((a["as_of"].date().isoformat(), a["row_data"]["content"]) for a in decayed
                    if a["row_data"]["user_id"] == PINNED_USER and "700" in a["row_data"]["content"])
    # all three together, on the first decay after the 7001 instruction's protection ended
    assert len(pinned) == 3 and len({day for day, _ in pinned}) == 1 and "2026-06-04" < pinned[0][0] <= "2026-06-10"

    # per subject (user, subject, relation): every archived statement is older than every kept one
    topics = {t.topic for t in triples}
    assert any(t.relation == "listens_on" and t.valid_until is not None for t in triples), "ports must change"
    checked = 0
    for topic in topics:
        about = [t for t in triples if t.topic == topic]
        gone = [(_moment(a["row_data"]["updated_at"]), a["row_data"]["id"]) for a in decayed
                if any(states(a["row_data"]["title"] + " " + a["row_data"]["content"], a["row_data"]["user_id"], t)
                       for t in about)]
        kept = [(e["updated_at"], e["id"]) for e in live if any(states(e["text"], e["user_id"], t) for t in about)]
        if gone and kept:
            assert max(gone) < min(kept), topic
            checked += 1
    assert checked > 0, "some subject must have both archived and kept statements"


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text)

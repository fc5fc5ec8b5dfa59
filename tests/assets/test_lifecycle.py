"""knowledge_entries, entity_graph, error_memory, memory_decay, forgetting and export
against the real database."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest

from assets.definitions import all_assets
from assets.distillation import conversation_segments, session_summaries
from assets.ingestion import transcripts
from assets.knowledge import knowledge_entries, memory_decay
from assets.resources import LifecycleSettings
from memory_pipelines.config import SAMPLE_TRANSCRIPTS
from memory_pipelines.embed import EmbedConfig, build_embedder
from memory_pipelines.graph import reachable, relations
from memory_pipelines.lifecycle import (DecayRange, expire_pii_older_than, export_markdown, forget, judge_decay,
                                        pii_entries, restore)
from memory_pipelines.search import MemorySearch, UnifiedMemorySearch
from memory_pipelines.shards import ALL_USERS
from memory_pipelines.stages.common import day_window
from memory_pipelines.stages.decay import decay
from tests.helpers import (EAGER_DECAY, content_fingerprints, materialization_metadata, materialize_partitions,
                           materialize_range, pipeline_resources)

DAYS = [(date(2026, 10, 1) + timedelta(days=i)).isoformat() for i in range(14)]
EMBEDDER = build_embedder(EmbedConfig())
# entries are what the summaries' distillation calls wrote: they need the summaries first
KNOWLEDGE = [conversation_segments, session_summaries, knowledge_entries]
# what decay reads
ASSETS = [transcripts, *KNOWLEDGE, memory_decay]


def rows(url, statement, params=None):
    with psycopg.connect(url) as conn:
        return conn.execute(statement, params).fetchall()


def write(folder, name, records):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))


def turn(session, user, seq, role, content, ts):
    return {"session_id": session, "user_id": user, "seq": seq, "role": role, "content": content, "ts": ts}


def test_sample_run_fills_the_knowledge_layer_and_reruns_change_nothing(database_url, tmp_path):
    results = materialize_partitions(all_assets, DAYS, database_url, SAMPLE_TRANSCRIPTS)
    counts = {t: rows(database_url, f"SELECT count(*) FROM {t}")[0][0]  # noqa: S608 - fixed table names
              for t in ("knowledge_entries", "entity_graph", "error_memory")}
    assert all(n > 0 for n in counts.values()), counts
    # two weeks of conversation: default decay archives none of it, and says why it kept each
    assert rows(database_url, "SELECT count(*) FROM memory_archive")[0][0] == 0
    [decayed] = results[-1].asset_materializations_for_node("memory_decay")
    kept = decayed.metadata["kept_by_reason"].value
    # the last day's run keeps what it stored itself; every other entry is too young
    assert kept["knowledge_entries:too_young"] > 0 and kept["memory_facts:facts_not_decayed"] > 0
    assert kept["knowledge_entries:too_young"] + kept.get("knowledge_entries:stored_this_run", 0) \
        == counts["knowledge_entries"]
    assert decayed.metadata["as_of"].value == "2026-10-14T17:50:40+00:00"  # the newest message, not the day's end
    with psycopg.connect(database_url) as conn:
        hits = UnifiedMemorySearch(conn, EMBEDDER).search("ledger-api port", scope="knowledge", user_id="bob")
        assert hits and all(h.source_type == "knowledge" for h in hits)
        files = export_markdown(conn, tmp_path / "export", "bob")
    assert files and all(f.read_text().startswith("---\nkind: ") for f in files)
    assert all("lineage: {" in f.read_text() and "version: " in f.read_text() for f in files)
    before = content_fingerprints(database_url, ["knowledge_entries", "knowledge_entry_versions", "entity_graph",
                                                 "error_memory", "memory_archive"])
    materialize_partitions(all_assets, DAYS, database_url, SAMPLE_TRANSCRIPTS)
    # access counts moved with the search above; everything else is as it was
    after = content_fingerprints(database_url, ["knowledge_entry_versions", "entity_graph", "error_memory"])
    assert after == {k: v for k, v in before.items() if k in after}


def test_versions_supersede_in_place_in_any_order(make_database, tmp_path):
    write(tmp_path, "a.jsonl", [turn("s1", "ann", 1, "user", "I prefer vim as my editor", "2026-10-01T10:00:00Z"),
                                turn("s1", "ann", 2, "assistant", "ok", "2026-10-01T10:01:00Z")])
    write(tmp_path, "b.jsonl", [turn("s2", "ann", 1, "user", "I prefer emacs as my editor", "2026-10-03T10:00:00Z"),
                                turn("s2", "ann", 2, "assistant", "ok", "2026-10-03T10:01:00Z")])
    statement = "SELECT kind, title, content, version FROM knowledge_entries WHERE title = 'editor'"
    in_order, reversed_order = make_database(), make_database()
    for url, days in ((in_order, ["2026-10-01", "2026-10-03"]), (reversed_order, ["2026-10-03", "2026-10-01"])):
        materialize_partitions([transcripts], ["2026-10-01", "2026-10-03"], url, tmp_path)
        materialize_partitions(KNOWLEDGE, days, url, tmp_path)
        assert rows(url, statement) == [("user", "editor", "editor: emacs", 2)]
        assert sorted(r[0] for r in rows(url, "SELECT content FROM knowledge_entry_versions")) == \
            ["editor: emacs", "editor: vim"]


def test_scope_global_ttl_consent_and_pii(database_url, tmp_path):
    write(tmp_path, "a.jsonl", [
        turn("s1", "ann", 1, "user", "I work at Acme Corp. My name is Ann Lee. My email is ann@example.org", "2026-10-01T10:00:00Z"),
        turn("s1", "ann", 2, "assistant", "noted", "2026-10-01T10:01:00Z"),
        turn("s2", "ben", 1, "user", "I work at Globex", "2026-10-01T11:00:00Z"),
        turn("s2", "ben", 2, "assistant", "noted", "2026-10-01T11:01:00Z")])
    resources = {**pipeline_resources(database_url, tmp_path),
                 "lifecycle": LifecycleSettings(entry_ttl_seconds=3600, consent_basis="consent")}
    materialize_partitions([transcripts, *KNOWLEDGE], ["2026-10-01"], database_url, tmp_path,
                           resources=resources)
    with psycopg.connect(database_url) as conn:
        conn.execute("""INSERT INTO knowledge_entries (entry_key, user_id, kind, title, content, confidence, importance,
            scope, valid_from, created_at, updated_at, session_id, seq_start, seq_end, partition_key, run_id, model,
            prompt_version) VALUES ('g1', NULL, 'insight', 'Acme and Globex', 'shared insight about employers', 0.9,
            0.72, 'global', now(), now(), now(), 'x', 1, 1, 'p', 'r', 'm', 'v')""")
        search = MemorySearch(conn, EMBEDDER)
        at = datetime(2026, 10, 1, 10, 30, tzinfo=UTC)
        ann = {h.text for h in search.search_knowledge("employer works Acme Globex", "ann", at=at)}
        assert any("Acme Corp" in t for t in ann) and any("shared insight" in t for t in ann)
        assert not any("Globex" in t and "employer" in t for t in ann if "shared" not in t)
        assert search.search_knowledge("employer", "ann", at=at, consent="legal_obligation") == []
        consented = search.search_knowledge("employer", "ann", at=at, consent="consent")
        assert consented and all(h.user_id == "ann" for h in consented)
        later = datetime(2026, 10, 1, 12, tzinfo=UTC)  # after the one-hour TTL
        assert all(h.user_id is None for h in search.search_knowledge("employer Acme", "ann", at=later))
        flagged = pii_entries(conn, "ann")
        assert flagged and all("email" in e["pii_kinds"] for e in flagged)
        contents = [r[0] for r in conn.execute("SELECT content FROM knowledge_entries WHERE user_id = 'ann'")]
        assert not any("ann@example.org" in c for c in contents)
        assert expire_pii_older_than(conn, timedelta(days=0), datetime(2026, 10, 2, tzinfo=UTC)) == len(flagged)
        assert pii_entries(conn, "ann") == []
        exported = export_markdown(conn, tmp_path / "all")
        assert exported and not any("@example.org" in f.read_text() for f in exported)
        files = export_markdown(conn, tmp_path / "out", "../../escape")
        assert all(f.parent == (tmp_path / "out").resolve() for f in files)
        assert not (tmp_path.parent / "escape").exists()


def test_graph_hops_validity_and_contradiction(make_sample_database):
    with psycopg.connect(make_sample_database()) as conn:
        ports = relations(conn, "bob", "ledger-api", "listens_on")
        assert [(t.object, t.valid_until is not None) for t in ports] == [("8080", True), ("9090", False)]
        assert ports[0].valid_until == ports[1].valid_from  # closed by the newer triple, not deleted
        on_oct5 = relations(conn, "bob", "ledger-api", "listens_on", at=datetime(2026, 10, 5, tzinfo=UTC))
        assert [t.object for t in on_oct5] == ["8080"]
        assert [t.object for t in relations(conn, "bob", "ledger-api", "listens_on",
                                            at=datetime(2026, 10, 10, tzinfo=UTC))] == ["9090"]
        one_hop = {t.object for t in relations(conn, "bob", "ledger-api")}
        assert {"auth-service", "9090", "8080"} <= one_hop
        fatima = relations(conn, "fatima", "tapas-finder", "deployed_on")
        assert [(t.object, t.valid_until is None) for t in fatima] == [("Heroku", False), ("Fly.io", True)]
        around = reachable(conn, "alice", "alice", hops=2)
        assert around.get("Acme Corp") == 1


def test_error_memory_and_ttl_renewal(make_sample_database):
    with psycopg.connect(make_sample_database()) as conn:
        [(expires_before,)] = conn.execute(
            "SELECT expires_at FROM error_memory WHERE user_id = 'dmitri' AND error ILIKE '%httpx%'").fetchall()
        hits = MemorySearch(conn, EMBEDDER).search_errors("ModuleNotFoundError httpx", "dmitri")
        assert hits and "fix:" in hits[0].text
        [(expires_after, count)] = conn.execute(
            "SELECT expires_at, hit_count FROM error_memory WHERE user_id = 'dmitri' AND error ILIKE '%httpx%'"
        ).fetchall()
        assert expires_after > expires_before and expires_after > datetime.now(UTC) + timedelta(days=89)
        assert count == 1
        # years later in no one's conversation: a TTL runs on its user's own clock, which stopped
        # with their last message (issue 37)
        report = decay(conn, datetime(2030, 1, 1, tzinfo=UTC), "2029-12-31", "test")
        assert report.archived["error_memory:ttl"] == 0
        # past its TTL by the user's clock: archived
        conn.execute("UPDATE error_memory SET expires_at = observed_at")
        report = decay(conn, datetime(2030, 1, 1, tzinfo=UTC), "2029-12-31", "test")
        assert report.archived["error_memory:ttl"] > 0
        assert conn.execute("SELECT count(*) FROM error_memory").fetchone()[0] == 0


def test_decay_judges_again_only_the_users_who_wrote_since_it_last_judged(make_sample_database):
    """A later day of the same run re-judges the users whose clock moved (and rows of no
    user): theirs are the verdicts judging everyone gives, the others' stand."""
    with psycopg.connect(make_sample_database()) as conn:
        # since the user who wrote last least recently wrote last: everyone else wrote since
        [(as_of, since)] = conn.execute("SELECT max(clock), min(clock) FROM (SELECT max(ts) AS clock FROM messages "
                                        "GROUP BY user_id) AS clocks").fetchall()
        wrote = {u for (u,) in conn.execute("SELECT DISTINCT user_id FROM messages WHERE ts > %s AND ts <= %s",
                                            (since, as_of))}
        moment = as_of + timedelta(microseconds=1)
        judging = DecayRange(conn, moment, moment, EAGER_DECAY.decay(), ALL_USERS, "later")
        everyone = judging.judge(as_of)
        again = judging.judge(as_of, changed_since=since)
    judged_users = {v.candidate.user_id for v in everyone}
    assert wrote and wrote < judged_users  # some users wrote in those days, not all
    assert {v.candidate.user_id for v in again} - {None} == wrote
    assert [(v.candidate.id, v.reason, v.score) for v in again] == \
        [(v.candidate.id, v.reason, v.score) for v in everyone if v.candidate.user_id in wrote | {None}]


def test_a_range_read_once_judges_each_day_as_reading_it_that_day_does(make_sample_database, monkeypatch):
    """`DecayRange` reads a range's rows once, its clocks a few days at a time, and advances
    through its days: each day's moment and verdicts are those of judging that day from the
    database."""
    monkeypatch.setattr(DecayRange, "CLOCK_DAYS", timedelta(days=3))  # the sample's two weeks in five reads
    days = [day_window(d) for d in DAYS]
    settings = EAGER_DECAY.decay()
    with psycopg.connect(make_sample_database()) as conn:
        judging = DecayRange(conn, days[0].start, days[-1].end, settings, ALL_USERS, "later")
        judged = 0
        for day in days:
            as_of = judging.advance(day.end)
            assert as_of == conn.execute("SELECT max(ts) FROM messages WHERE ts < %s", (day.end,)).fetchone()[0]
            if as_of is None:
                continue
            verdicts = [(v.candidate.source_table, v.candidate.id, v.reason, v.score, v.as_of)
                        for v in judging.judge(as_of)]
            assert verdicts == [(v.candidate.source_table, v.candidate.id, v.reason, v.score, v.as_of)
                                for v in judge_decay(conn, as_of, settings, run_id="later")]
            judged += len(verdicts)
        assert judging.last == as_of and judged > 0
        assert {v.reason for v in judging.judge(as_of)} >= {"decayed"}  # archiving something is judged too


def test_a_row_another_transaction_touched_since_the_range_read_it_is_judged_as_it_is_now(make_sample_database):
    """A range judges from rows read at its start; what it would archive is read again first:
    an entry a search hit in the meantime is recently accessed, and an error memory whose TTL
    a hit extended has not expired."""
    url = make_sample_database()
    settings = EAGER_DECAY.decay()
    with psycopg.connect(url) as conn, psycopg.connect(url, autocommit=True) as other:
        [(as_of,)] = conn.execute("SELECT max(ts) FROM messages").fetchall()
        moment = as_of + timedelta(microseconds=1)
        other.execute("UPDATE error_memory SET expires_at = observed_at")  # every TTL over
        judging = DecayRange(conn, moment, moment, settings, ALL_USERS, "later", seen_by=as_of)
        decayed = [v.candidate.id for v in judge_decay(conn, as_of, settings, run_id="later") if v.archived
                   and v.candidate.source_table == "knowledge_entries"]
        expired = [e["id"] for e in DecayRange(conn, moment, moment, settings, ALL_USERS, "later",
                                               seen_by=as_of).expired(as_of)]
        assert decayed and expired  # without the hits below, both would go
        # meanwhile a search hits one entry and one error memory (an access; a TTL extended)
        other.execute("UPDATE knowledge_entries SET access_count = access_count + 1, last_accessed_at = now() "
                      "WHERE id = %s", [decayed[0]])
        other.execute("UPDATE error_memory SET expires_at = %s WHERE id = %s",
                      [as_of + timedelta(days=90), expired[0]])
        verdicts = {v.candidate.id: v for v in judging.judge(as_of)
                    if v.candidate.source_table == "knowledge_entries"}
        assert verdicts[decayed[0]].reason == "recently_accessed" and not verdicts[decayed[0]].archived
        assert all(verdicts[i].archived for i in decayed[1:])
        assert [e["id"] for e in judging.expired(as_of)] == expired[1:]


def test_decay_archives_restores_and_is_deterministic(make_database):
    urls = [make_database(), make_database()]
    for url in urls:
        materialize_partitions(all_assets, DAYS, url, SAMPLE_TRANSCRIPTS,
                               resources=pipeline_resources(url, SAMPLE_TRANSCRIPTS, lifecycle=EAGER_DECAY))
    # the second database also gets a backfill of past days of decay: as of those days'
    # newest messages it finds nothing more to move, so both archives stay the same
    materialize_partitions([memory_decay], DAYS[2:5], urls[1], SAMPLE_TRANSCRIPTS,
                           resources=pipeline_resources(urls[1], SAMPLE_TRANSCRIPTS, lifecycle=EAGER_DECAY))
    archived = "SELECT source_table, source_key, user_id, reason, score FROM memory_archive ORDER BY 1, 2, 3, 4, 5"
    assert rows(urls[0], archived) == rows(urls[1], archived) != []
    for url in urls:
        with psycopg.connect(url) as conn:
            decay(conn, datetime(2026, 12, 1, tzinfo=UTC), "2026-11-30", "fixed-run", EAGER_DECAY.decay())
    # the same rows archived for the same reasons with the same scores (row_data holds run ids)
    assert rows(urls[0], archived) == rows(urls[1], archived) != []
    assert content_fingerprints(urls[0], ["knowledge_entries", "memory_facts"]) == \
        content_fingerprints(urls[1], ["knowledge_entries", "memory_facts"])
    with psycopg.connect(urls[0]) as conn:
        reasons = dict(conn.execute("SELECT reason, count(*) FROM memory_archive GROUP BY 1").fetchall())
        assert reasons.get("decayed", 0) > 0
        archive_id, table, source_id = conn.execute(
            "SELECT id, source_table, source_id FROM memory_archive WHERE source_table = 'knowledge_entries' "
            "ORDER BY id LIMIT 1").fetchone()
        assert restore(conn, archive_id) == [(table, source_id)]
        assert conn.execute("SELECT count(*) FROM knowledge_entries WHERE id = %s", (source_id,)).fetchone()[0] == 1
        assert conn.execute("SELECT search_tsv IS NOT NULL FROM knowledge_entries WHERE id = %s",
                            (source_id,)).fetchone()[0]
        with pytest.raises(LookupError):
            restore(conn, archive_id)


def test_forget_removes_every_derived_row_of_one_user_and_nothing_else(database_url, tmp_path):
    folder = tmp_path / "t"
    shutil.copytree(SAMPLE_TRANSCRIPTS, folder)
    materialize_partitions(all_assets, DAYS, database_url, folder)
    tables = [r[0] for r in rows(database_url, "SELECT table_name FROM information_schema.columns WHERE "
                                               "table_schema = 'public' AND column_name = 'user_id' "
                                               "AND table_name <> 'forgotten' ORDER BY 1")]
    others_before = {t: rows(database_url, f"SELECT count(*) FROM {t} WHERE user_id <> 'bob'")[0][0]  # noqa: S608
                     for t in tables}
    with psycopg.connect(database_url) as conn, conn.transaction():
        removed = forget(conn, "bob")
    assert removed["messages"] > 0 and removed["memory_facts"] > 0 and removed["knowledge_entries"] > 0
    for table in tables:
        assert rows(database_url, f"SELECT count(*) FROM {table} WHERE user_id = 'bob'")[0][0] == 0, table  # noqa: S608
    session_tables = [r[0] for r in rows(database_url, "SELECT table_name FROM information_schema.columns WHERE "
                                                       "table_schema = 'public' AND column_name = 'session_id'")]
    for table in session_tables:
        assert rows(database_url, f"SELECT count(*) FROM {table} WHERE session_id LIKE 's-bob-%%'")[0][0] == 0, table  # noqa: S608
    others_after = {t: rows(database_url, f"SELECT count(*) FROM {t} WHERE user_id <> 'bob'")[0][0]  # noqa: S608
                    for t in tables}
    assert {t: n for t, n in others_after.items() if t != "memory_archive"} == \
        {t: n for t, n in others_before.items() if t != "memory_archive"}
    assert rows(database_url, "SELECT user_id, session_id FROM forgotten") == [("bob", "")]
    # the files are still on disk: a later run does not bring bob back
    results = materialize_partitions([transcripts], DAYS, database_url, folder)
    assert sum(r.asset_materializations_for_node("transcripts")[0].metadata["forgotten"].value
               for r in results) > 0
    assert rows(database_url, "SELECT count(*) FROM messages WHERE user_id = 'bob'")[0][0] == 0


def _instruction_days(user: str, days: list[str], tool: str) -> list[dict]:
    """A session a day in which `user` gives a standing instruction and the agent agrees."""
    return [turn(f"s-{user}-{day}", user, seq, role, text, f"{day}T10:0{seq}:00Z")
            for n, day in enumerate(days)
            for seq, (role, text) in enumerate([("user", f"Let's run {tool}-{n} on port {5000 + n} from now on."),
                                                ("assistant", "Agreed, noted.")], start=1)]


def test_a_backfill_then_another_users_day_archives_nothing_of_the_backfilled_user(database_url, tmp_path):
    """Issue 37: memory ages by its owner's clock. Ann's August is imported (one range run, as
    a backfill from the UI); months later a run of one day of ben's: as of ben's newest
    message ann's entries would be over 90 days old and never accessed, but ann has said
    nothing since August, so nothing of hers is archived, now or by any later run of others."""
    august = [f"2026-08-{d:02d}" for d in range(1, 6)]
    write(tmp_path, "ann.jsonl", _instruction_days("ann", august, "report-builder"))
    materialize_range(ASSETS, august[0], august[-1], pipeline_resources(database_url, tmp_path))
    entries = "SELECT count(*) FROM knowledge_entries WHERE user_id = 'ann'"
    stored = rows(database_url, entries)[0][0]
    assert stored >= len(august)  # the instructions are memory to lose
    write(tmp_path, "ben.jsonl", _instruction_days("ben", ["2026-12-04"], "gateway"))
    [later] = materialize_partitions(ASSETS, ["2026-12-04"], database_url, tmp_path)
    assert rows(database_url, "SELECT source_key, user_id, reason FROM memory_archive") == []
    assert rows(database_url, entries)[0][0] == stored
    kept = materialization_metadata(later, "memory_decay")["kept_by_reason"]
    assert kept["knowledge_entries:too_young"] >= stored  # by ann's clock, her August is days old


def test_a_row_this_run_stored_is_never_archived_by_it(database_url, tmp_path):
    """Months of one user imported in one run: the entries of January are over 90 days old by
    the user's newest message, but this run stored them; the next run of that user judges them."""
    days = ["2026-01-03", "2026-01-10", "2026-04-10"]  # 97 days: January is past the minimum age by April
    write(tmp_path, "cleo.jsonl", _instruction_days("cleo", days, "indexer"))
    ranged = materialize_range(ASSETS, days[0], days[-1], pipeline_resources(database_url, tmp_path))
    assert rows(database_url, "SELECT count(*) FROM memory_archive")[0][0] == 0
    # a range's counts are on its last day
    by_day = {m.partition: m.metadata for m in ranged.asset_materializations_for_node("memory_decay")}
    assert by_day[days[-1]]["kept_by_reason"].value["knowledge_entries:stored_this_run"] > 0
    write(tmp_path, "cleo-later.jsonl", _instruction_days("cleo", ["2026-04-20"], "indexer-late"))
    materialize_partitions(ASSETS, ["2026-04-20"], database_url, tmp_path)
    archived = rows(database_url, "SELECT user_id, reason, as_of FROM memory_archive")
    assert archived and {(user, reason) for user, reason, _ in archived} == {("cleo", "decayed")}
    # judged by cleo's own newest message, the one of the run that archived them
    assert {as_of.date().isoformat() for _, _, as_of in archived} == {"2026-04-20"}

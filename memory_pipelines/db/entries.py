"""Knowledge entries, their versions and sources, error memory and the entity graph (`sql/queries/entries.sql`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from itertools import groupby

import psycopg
from psycopg.rows import dict_row

from memory_pipelines.core.knowledge_entries import FUNCTIONAL_RELATIONS, EntryCandidate, RelationCandidate
from memory_pipelines.db.lifecycle import archive_rows, restore_archived, restore_reobserved
from memory_pipelines.db.queries import query
from memory_pipelines.db.rows import NO_CALL, grouped, in_rounds, load_rows
from memory_pipelines.records import Summary, TimeWindow, shallow_fields
from memory_pipelines.shards import Shard


def summaries_as_of_sessions(conn: psycopg.Connection, session_ids: Sequence[str],
                             partition_key: str) -> dict[str, tuple[int, Summary]]:
    """Each session's newest summary version up to the day: (version, summary); sessions
    without one are left out."""
    rows = conn.execute(query("summaries_as_of_sessions"), {"session_ids": list(session_ids),
                                                            "partition_key": partition_key})
    return {session_id: (version, Summary.from_json(summary)) for session_id, version, summary in rows}


def knowledge_source_fingerprints(conn: psycopg.Connection,
                                  session_days: Sequence[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """(partition key, session) -> what that session-day's stored entries were synthesized from."""
    rows = conn.execute(query("knowledge_source_fingerprints"), {
        "partition_keys": [key for key, _ in session_days], "session_ids": [s for _, s in session_days]})
    return {(key, session_id): fingerprint for key, session_id, fingerprint in rows}


def forge_knowledge(conn: psycopg.Connection, entries: Sequence[tuple[EntryCandidate, dict]]) -> int:
    """Persist entries, each with its lineage (a batch of sessions' at once): a version row
    per distinct content, the entry updated in place. Returns the entries inserted or changed."""
    if not entries:
        return 0
    rows = [{**shallow_fields(e), "entry_key": e.key, "content_hash": e.content_hash, "tags": list(e.tags),
             "pii_kinds": list(e.pii_kinds), **NO_CALL, **lineage} for e, lineage in entries]
    ever_archived = {key for (key,) in conn.execute(query("archived_entry_keys"),
                                                    {"entry_keys": [row["entry_key"] for row in rows]})}
    written = 0
    # in the given order, which decides the serial ids new entries get
    for archived, group in groupby(rows, key=lambda row: row["entry_key"] in ever_archived):
        if archived:
            written += sum(_forge_archived_key(conn, row) for row in group)
            continue
        # keys decay never took: plain upserts
        written += _upsert_entries(conn, list(group))
    return written


_ENTRY_LOAD_COLUMNS = ("user_id", "kind", "title", "content", "tags", "confidence", "importance",
                       "scope", "scope_id", "consent_basis", "has_pii", "pii_kinds", "observed_at", "valid_until",
                       "session_id", "seq_start", "seq_end", "partition_key", "run_id", "model", "prompt_version",
                       "call_id")


def _upsert_entries(conn: psycopg.Connection, rows: Sequence[dict]) -> int:
    """Upsert entries and their versions as if one by one, in order: loaded by `COPY`, the
    versions first (an entry's version counts its key's distinct contents: an entry upserted
    twice ends with the count of both either way), then the entries one statement per round,
    round n holding each key's n-th row (the rows of one key apply in order; those of
    different keys do not depend on each other). Returns the entries inserted or changed."""
    rounds: Counter = Counter()
    keyed = ((row["entry_key"], [row["entry_key"], row["content_hash"], *(row[c] for c in _ENTRY_LOAD_COLUMNS)])
             for row in rows)
    load_rows(conn, "create_entry_load", "entry_load", in_rounds(keyed, rounds))
    conn.execute(query("upsert_versions_from_load"))
    written = sum(conn.execute(query("upsert_entries_from_load"), {"round": n}).rowcount
                  for n in range(1, max(rounds.values(), default=0) + 1))
    return written


def _forge_archived_key(conn: psycopg.Connection, row: dict) -> int:
    archived = conn.execute(query("archived_entry_newer"), {"entry_key": row["entry_key"],
                                                            "observed_at": row["observed_at"]}).fetchone()
    if archived is not None:
        # An older observation than the archived entry's last (its day run late, after a
        # failure): the entry stays archived, but when the observation is new to its
        # history it gets the versions and first-seen time the days in order give it.
        if conn.execute(query("upsert_knowledge_version"), row).rowcount:
            _fold_into_archived_entry(conn, archived, row)
        return 0
    restore_reobserved(conn, "archived_entries_reobserved", {"entry_key": row["entry_key"],
                                                              "observed_at": row["observed_at"]})
    return _upsert_entries(conn, [row])


def _fold_into_archived_entry(conn: psycopg.Connection, archived: tuple, row: dict) -> None:
    """Restore the archived entry, upsert the older observation into it (its content stays:
    event time wins) and archive it again as decay did."""
    archive_id, reason, score, as_of, partition_key, run_id = archived
    [(_, entry_id)] = restore_archived(conn, archive_id)
    _upsert_entries(conn, [row])
    archive_rows(conn, "knowledge_entries", [{"id": entry_id, "key": row["entry_key"], "reason": reason,
                                              "score": score, "as_of": as_of.isoformat()}], partition_key, run_id)


def forge_relations(conn: psycopg.Connection, relations: Sequence[tuple[RelationCandidate, dict]]) -> None:
    """Insert triples, each with its lineage (its user among it), then close the one-value
    relations they contradict (in any order: closing does not depend on it)."""
    if not relations:
        return
    closing = sorted({(lineage["user_id"], r.subject, r.relation) for r, lineage in relations
                      if r.relation in FUNCTIONAL_RELATIONS})
    # a batch of each (a third of the client's work of a statement each)
    with conn.cursor() as cur:
        cur.executemany(query("insert_relation"),
                        [{**shallow_fields(r), **NO_CALL, **lineage} for r, lineage in relations])
        cur.executemany(query("close_contradicted"), [{"user_id": user_id, "subject": subject, "relation": relation}
                                                      for user_id, subject, relation in closing])


def record_knowledge_sources(conn: psycopg.Connection, rows: Sequence[dict]) -> None:
    """What each session-day's synthesis followed from (its fingerprint) and how many entries it gave."""
    if rows:
        with conn.cursor() as cur:
            cur.executemany(query("record_knowledge_source"), rows)


def tool_failure_days(conn: psycopg.Connection, window: TimeWindow, shard: Shard) -> dict[str, list[str]]:
    """Partition key -> the shard's sessions (forks left out) with a failed tool call that
    day, for the days of `window` with one."""
    return grouped(conn.execute(query("tool_failure_days"), {"start": window.start, "end": window.end,
                                                            **shard.params}))


def upsert_error_memory(conn: psycopg.Connection, rows: Sequence[dict]) -> None:
    """Write these resolved tool errors in one batch."""
    with conn.cursor() as cur:
        cur.executemany(query("upsert_error_memory"), rows)


def graph_relations(conn: psycopg.Connection, user_id: str, entity: str | None, relation: str | None,
                    at: datetime | None) -> list[dict]:
    """The user's entity-graph triples around `entity` (or all), of `relation` (or any),
    valid at `at` (or ever), as dicts: ranked by confidence at a moment, else by creation."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("graph_relations"), {"user_id": user_id, "entity": entity, "relation": relation,
                                                      "at": at}).fetchall()

"""The end of a memory's life: decay archival (and restore), forgetting on request, and
export of knowledge entries as Markdown."""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from memory_pipelines.db import repository
from memory_pipelines.db.queries import query
from memory_pipelines.knowledge import decay_score
from memory_pipelines.pii import sanitize

DECAY_BASE_RATE = 0.001  # per hour
DECAY_THRESHOLD = 0.5
PII_RETENTION = timedelta(days=180)
# forget deletes in this order: children before what they were derived from
FORGET_TABLES = (
    "memory_facts_hidden", "memory_facts", "memory_fact_rejections", "memory_summary", "session_memory_state",
    "memory_chunks", "sketches", "recall_ledger", "knowledge_sources", "knowledge_entry_versions", "knowledge_entries", "entity_graph",
    "error_memory", "memory_archive", "session_summary_versions", "session_summaries", "conversation_segments",
    "llm_calls", "quarantine", "messages", "sessions",
)


@dataclass
class DecayReport:
    archived: Counter = field(default_factory=Counter)
    scores: list[float] = field(default_factory=list)

    def distribution(self) -> dict[str, float]:
        if not self.scores:
            return {}
        ordered = sorted(self.scores)
        return {"min": round(ordered[0], 4), "p25": round(ordered[len(ordered) // 4], 4),
                "median": round(statistics.median(ordered), 4), "p75": round(ordered[3 * len(ordered) // 4], 4),
                "max": round(ordered[-1], 4), "count": len(ordered)}


def _archive(conn: psycopg.Connection, table: str, rows: list[dict], as_of: datetime, partition_key: str,
             run_id: str) -> None:
    if not rows:
        return
    ids = [r["id"] for r in rows]
    if table == "memory_facts":  # hidden rows go with their survivor (they point at it)
        conn.execute(query("archive_hidden_facts"), {"ids": ids, "as_of": as_of, "partition_key": partition_key,
                                                      "run_id": run_id})
        conn.execute(query("delete_hidden_facts_of"), {"ids": ids})
    conn.execute(sql.SQL(query("archive_rows")).format(table=sql.Identifier(table)), {
        "table": table, "rows": Jsonb(rows), "as_of": as_of, "partition_key": partition_key, "run_id": run_id})
    conn.execute(sql.SQL(query("delete_rows")).format(table=sql.Identifier(table)), {"ids": ids})


def decay(conn: psycopg.Connection, as_of: datetime, partition_key: str, run_id: str, *,
          base_rate: float = DECAY_BASE_RATE, threshold: float = DECAY_THRESHOLD,
          pii_retention: timedelta = PII_RETENTION) -> DecayReport:
    """Score every knowledge entry and fact as of `as_of` (a partition's end, so a backfill
    reproduces it) and move to memory_archive what fell below the threshold, what expired,
    error memories past their TTL and PII past its retention age."""
    report = DecayReport()
    for table, listing in (("knowledge_entries", "decay_knowledge_candidates"),
                           ("memory_facts", "decay_fact_candidates")):
        with conn.cursor(row_factory=dict_row) as cur:
            candidates = cur.execute(query(listing), {"as_of": as_of}).fetchall()
        moving = []
        for c in candidates:
            age_hours = (as_of - c["seen_at"]).total_seconds() / 3600
            score = decay_score(float(c["importance"]), age_hours, c["access_count"], base_rate)
            report.scores.append(score)
            if c["valid_until"] is not None and c["valid_until"] <= as_of:
                reason = "expired"
            elif c["has_pii"] and c["seen_at"] < as_of - pii_retention:
                reason = "pii_retention"
            elif score < threshold:
                reason = "decayed"
            else:
                continue
            moving.append({"id": c["id"], "key": c["key"], "reason": reason, "score": round(score, 6)})
            report.archived[f"{table}:{reason}"] += 1
        _archive(conn, table, moving, as_of, partition_key, run_id)
    with conn.cursor(row_factory=dict_row) as cur:
        expired = [{"id": r["id"], "key": r["key"], "reason": "ttl", "score": None}
                   for r in cur.execute(query("expired_errors"), {"as_of": as_of}).fetchall()]
    _archive(conn, "error_memory", expired, as_of, partition_key, run_id)
    report.archived["error_memory:ttl"] += len(expired)
    return report


def restore(conn: psycopg.Connection, archive_id: int) -> list[tuple[str, int]]:
    """Put an archived row back where it was (with the hidden fact rows archived with it)."""
    restored = repository.restore_archived(conn, archive_id)
    if not restored:
        raise LookupError(f"no archived row {archive_id}")
    return restored


def forget(conn: psycopg.Connection, user_id: str, session_id: str | None = None) -> dict[str, int]:
    """Delete a user's (or one of their sessions') messages and everything derived from
    them, through the lineage columns, in the caller's transaction; record a tombstone so
    ingestion does not bring them back. Returns the rows removed per table."""
    session_ids = [r[0] for r in conn.execute(query("forget_session_ids"),
                                              {"user_id": user_id, "session_id": session_id})]
    params = {"user_id": user_id, "session_ids": session_ids, "whole_user": session_id is None}
    removed: dict[str, int] = {}
    conn.execute(query("forget_unhide_facts"), params)
    for table in FORGET_TABLES:
        count = conn.execute(query(f"forget_{table}"), params).rowcount
        name = "memory_facts" if table == "memory_facts_hidden" else table
        removed[name] = removed.get(name, 0) + count
    conn.execute(query("record_forgotten"), {"user_id": user_id, "session_key": session_id or ""})
    return removed


def unforget(conn: psycopg.Connection, user_id: str, session_id: str | None = None) -> bool:
    """Lift a tombstone, so the transcripts can be ingested again on purpose."""
    return conn.execute(query("unforget"), {"user_id": user_id, "session_key": session_id or ""}).rowcount > 0


_SLUG = re.compile(r"[^a-z0-9]+")


def _yaml(value) -> str:
    # JSON scalars and lists are valid YAML flow values
    return json.dumps(value, ensure_ascii=False, default=str)


def export_markdown(conn: psycopg.Connection, out_dir: Path, user_id: str | None = None) -> list[Path]:
    """One Markdown file per knowledge entry (the user's and global ones, or all), with YAML
    frontmatter, sanitized. File names are built from the entry only, never from input, so
    nothing is written outside `out_dir`."""
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with conn.cursor(row_factory=dict_row) as cur:
        entries = cur.execute(query("export_entries"), {"user_id": user_id}).fetchall()
    for e in entries:
        title, content = sanitize(e["title"]).text, sanitize(e["content"]).text
        slug = _SLUG.sub("-", title.casefold()).strip("-")[:60] or "entry"
        path = out_dir / f"{e['kind']}-{slug}-{e['entry_key'][:10]}.md"
        lineage = {k: e[k] for k in ("session_id", "seq_start", "seq_end", "partition_key", "run_id", "model",
                                     "prompt_version")}
        front = {"kind": e["kind"], "title": title, "tags": list(e["tags"]), "scope": e["scope"],
                 "scope_id": e["scope_id"], "version": e["version"], "confidence": round(e["confidence"], 3),
                 "importance": round(e["importance"], 3), "valid_until": e["valid_until"],
                 "consent_basis": e["consent_basis"], "updated_at": e["updated_at"], "lineage": lineage}
        lines = ["---", *(f"{k}: {_yaml(v)}" for k, v in front.items()), "---", "", f"# {title}", "", content, ""]
        path.write_text("\n".join(lines), encoding="utf-8")
        written.append(path)
    return written


def pii_entries(conn: psycopg.Connection, user_id: str | None = None) -> list[dict]:
    """Knowledge entries that held PII (sanitized before they were stored), to list or count."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query("pii_entries"), {"user_id": user_id}).fetchall()


def expire_pii_older_than(conn: psycopg.Connection, age: timedelta, as_of: datetime, run_id: str = "manual") -> int:
    """Archive (reason pii_retention) entries that held PII and were last seen before `as_of - age`."""
    old = [{"id": e["id"], "key": e["entry_key"], "reason": "pii_retention", "score": None}
           for e in pii_entries(conn) if e["updated_at"] < as_of - age]
    _archive(conn, "knowledge_entries", old, as_of, as_of.date().isoformat(), run_id)
    return len(old)

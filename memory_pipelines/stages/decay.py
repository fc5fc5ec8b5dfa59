"""Stage `memory_decay`: decay archival of each day as of the newest message seen before
its end (conversation time), in order. What may be archived at all is `DecaySettings`'
(minimum age and disuse, threshold, whether facts decay); archived rows stay restorable."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.config import DecaySettings
from memory_pipelines.db import lifecycle as lifecycle_db
from memory_pipelines.lifecycle import judge_decay, move_to_archive
from memory_pipelines.shards import ALL_USERS, Shard
from memory_pipelines.stages.common import NO_BACKENDS, Backends, Counts, StageReport, Window

ASSET = "memory_decay"


@dataclass
class DecayCounts(Counts):
    as_of: str = "nothing ingested yet"
    archived: int = 0
    archived_by_reason: Counter = field(default_factory=Counter)  # "table:reason" -> rows archived
    kept_by_reason: Counter = field(default_factory=Counter)  # "table:reason" -> rows considered and kept
    score_distribution: dict[str, float] = field(default_factory=dict)  # of the last day judged


@dataclass
class DecayReport:
    as_of: datetime | None = None
    archived: Counter = field(default_factory=Counter)  # "table:reason" -> rows moved to the archive
    kept: Counter = field(default_factory=Counter)  # "table:reason" -> rows decay considered and kept
    scores: list[float] = field(default_factory=list)

    def distribution(self) -> dict[str, float]:
        if not self.scores:
            return {}
        ordered = sorted(self.scores)
        return {"min": round(ordered[0], 4), "p25": round(ordered[len(ordered) // 4], 4),
                "median": round(statistics.median(ordered), 4), "p75": round(ordered[3 * len(ordered) // 4], 4),
                "max": round(ordered[-1], 4), "count": len(ordered)}


def decay_as_of(conn: psycopg.Connection, window_end: datetime, shard: Shard = ALL_USERS) -> datetime | None:
    """The shard's clock: the newest message of its users the pipeline has seen before the
    window's end (conversation time, never the wall clock or a file's date), so a backfill
    reproduces it and a shard never waits on another; None when nothing was ingested yet.
    Each user's memory is judged by that user's own clock (`lifecycle.user_clocks`); this one serves
    rows of no user and tells whether anything happened since."""
    return lifecycle_db.newest_message_before(conn, window_end, shard)


def decay(conn: psycopg.Connection, as_of: datetime, partition_key: str, run_id: str,
          settings: DecaySettings = DecaySettings(), shard: Shard = ALL_USERS,
          changed_since: datetime | None = None) -> DecayReport:
    """Judge every knowledge entry and fact (of the shard's users) seen by `as_of`, each by
    its user's clock (`lifecycle.judge_decay`, `core.knowledge_entries.plan_decay`), and move
    to memory_archive what it archives (never what this run stored), and error memories past
    their TTL. With `changed_since` (this run judged as of it already) only the users who
    wrote since: a long backfill's work grows with its messages, not with its days × users."""
    report = DecayReport(as_of=as_of)
    verdicts = judge_decay(conn, as_of, settings, shard=shard, run_id=run_id, changed_since=changed_since)
    for table in ("knowledge_entries", "memory_facts"):
        moving = []
        for v in verdicts:
            if v.candidate.source_table != table:
                continue
            report.scores.append(v.score)
            (report.archived if v.archived else report.kept)[f"{table}:{v.reason}"] += 1
            if v.archived:
                moving.append({"id": v.candidate.id, "key": v.candidate.key, "reason": v.reason,
                               "score": round(v.score, 6), "as_of": v.as_of.isoformat()})
        move_to_archive(conn, table, moving, partition_key, run_id)
    expired = [{"id": r["id"], "key": r["key"], "reason": "ttl", "score": None, "as_of": r["as_of"].isoformat()}
               for r in lifecycle_db.expired_errors(conn, as_of, run_id, shard)]
    move_to_archive(conn, "error_memory", expired, partition_key, run_id)
    report.archived["error_memory:ttl"] += len(expired)
    return report


def run(pool: ConnectionPool, window: Window, settings: DecaySettings,
        backends: Backends = NO_BACKENDS) -> StageReport[DecayCounts]:
    counts = DecayCounts()
    # a day without a message decays as of the same moment as the day before, which changes
    # nothing (decay is idempotent): only the first day and days with data
    active = window.active_days(pool) | {window.first}
    with pool.connection() as conn:
        # the run's first day judges everyone (anything may have changed since the last run), and
        # so does its last, which the report's score distribution describes; the days between
        # only the users whose clock moved since the day judged before
        last = decay_as_of(conn, window.span.end, window.shard)
        judged_as_of = None
        for key, day in window.days(ASSET, only=active):  # each day as of its own newest message, in order
            as_of = decay_as_of(conn, day.end, window.shard)
            if as_of is None or as_of == judged_as_of:
                continue  # nothing ingested yet, or no message since the day judged before
            changed_since = None if as_of == last else judged_as_of
            judged_as_of = as_of
            with conn.transaction():
                judged = decay(conn, as_of, key, window.run_id, settings, window.shard, changed_since)
            counts.as_of = judged.as_of.isoformat()
            counts.archived += sum(judged.archived.values())
            counts.archived_by_reason.update(judged.archived)
            counts.kept_by_reason.update(judged.kept)
            counts.score_distribution = judged.distribution()
    # only the reasons that happened
    counts.archived_by_reason = Counter({k: v for k, v in counts.archived_by_reason.items() if v})
    counts.kept_by_reason = Counter({k: v for k, v in counts.kept_by_reason.items() if v})
    return StageReport(counts)

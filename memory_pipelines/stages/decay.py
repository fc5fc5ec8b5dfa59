"""Stage `memory_decay`: decay archival of each day as of the newest message seen before
its end (conversation time), in order. What may be archived at all is `DecaySettings`'
(minimum age and disuse, threshold, whether facts decay); archived rows stay restorable."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import psycopg
from psycopg_pool import ConnectionPool

from memory_pipelines.config import DecaySettings
from memory_pipelines.lifecycle import DecayRange, move_to_archive
from memory_pipelines.shards import ALL_USERS, Shard
from memory_pipelines.stages.common import NO_BACKENDS, Backends, Counts, Slices, StageReport, Window

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


def decay(conn: psycopg.Connection, as_of: datetime, partition_key: str, run_id: str,
          settings: DecaySettings = DecaySettings(), shard: Shard = ALL_USERS) -> DecayReport:
    """Judge every knowledge entry and fact (of the shard's users) seen by `as_of`, each by
    its user's clock, and move to memory_archive what it archives (never what run `run_id`
    stored), and error memories past their TTL: one moment, as a day of the stage does."""
    moment = as_of + timedelta(microseconds=1)  # the clocks count the message at as_of itself
    judging = DecayRange(conn, moment, moment, settings, shard, run_id, seen_by=as_of)
    return archive_judged(conn, judging, as_of, None, partition_key, run_id)


def archive_judged(conn: psycopg.Connection, judging: DecayRange, as_of: datetime, changed_since: datetime | None,
                   partition_key: str, run_id: str) -> DecayReport:
    """Judge as of `as_of` (`DecayRange.judge`: with `changed_since`, only the users who wrote
    since) and move what it archives, and the error memories past their TTL, to memory_archive."""
    report = DecayReport(as_of=as_of)
    verdicts = judging.judge(as_of, changed_since)
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
        judging.drop(table, {r["id"] for r in moving})
    expired = judging.expired(as_of)
    move_to_archive(conn, "error_memory", expired, partition_key, run_id)
    judging.drop("error_memory", {r["id"] for r in expired})
    report.archived["error_memory:ttl"] += len(expired)
    return report


def run(pool: ConnectionPool, window: Window, settings: DecaySettings,
        backends: Backends = NO_BACKENDS) -> StageReport[DecayCounts]:
    counts = DecayCounts()
    # a day without a message decays as of the same moment as the day before, which changes
    # nothing (decay is idempotent): only the first day and days with data
    active = window.active_days(pool) | {window.first}
    with pool.connection() as conn:
        # what every day judges is read once; each day is judged as of its shard's newest
        # message (conversation time, never the wall clock), its users each by their own
        judging = DecayRange(conn, window.span.start, window.span.end, settings, window.shard, window.run_id)
        # the run's first day judges everyone (anything may have changed since the last run), and
        # so does its last, which the report's score distribution describes; the days between
        # only the users whose clock moved since the day judged before
        judged_as_of = None
        with Slices(conn) as slices:
            for key, day in window.days(ASSET, only=active):  # in order
                as_of = judging.advance(day.end)
                if as_of is None or as_of == judged_as_of:
                    continue  # nothing ingested yet, or no message since the day judged before
                changed_since = None if as_of == judging.last else judged_as_of
                judged_as_of = as_of
                with slices.item():
                    judged = archive_judged(conn, judging, as_of, changed_since, key, window.run_id)
                counts.as_of = judged.as_of.isoformat()
                counts.archived += sum(judged.archived.values())
                counts.archived_by_reason.update(judged.archived)
                counts.kept_by_reason.update(judged.kept)
                counts.score_distribution = judged.distribution()
    # only the reasons that happened
    counts.archived_by_reason = Counter({k: v for k, v in counts.archived_by_reason.items() if v})
    counts.kept_by_reason = Counter({k: v for k, v in counts.kept_by_reason.items() if v})
    return StageReport(counts)

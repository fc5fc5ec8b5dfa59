"""Stage `memory_decay`: decay archival of each day as of the newest message seen before
its end (conversation time), in order. What may be archived at all is `DecaySettings`'
(minimum age and disuse, threshold, whether facts decay); archived rows stay restorable."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from psycopg_pool import ConnectionPool

from memory_pipelines.config import DecaySettings
from memory_pipelines.lifecycle import decay, decay_as_of
from memory_pipelines.stages.common import NO_BACKENDS, Backends, Counts, StageReport, Window

ASSET = "memory_decay"


@dataclass
class DecayCounts(Counts):
    as_of: str = "nothing ingested yet"
    archived: int = 0
    archived_by_reason: Counter = field(default_factory=Counter)  # "table:reason" -> rows archived
    kept_by_reason: Counter = field(default_factory=Counter)  # "table:reason" -> rows considered and kept
    score_distribution: dict[str, float] = field(default_factory=dict)  # of the last day judged


def run(pool: ConnectionPool, window: Window, settings: DecaySettings,
        backends: Backends = NO_BACKENDS) -> StageReport[DecayCounts]:
    counts = DecayCounts()
    judged_as_of = None
    # a day without a message decays as of the same moment as the day before, which changes
    # nothing (decay is idempotent): only the first day and days with data
    active = window.active_days(pool) | {window.first}
    with pool.connection() as conn:
        for key, day in window.days(ASSET, only=active):  # each day as of its own newest message, in order
            as_of = decay_as_of(conn, day.end, window.shard)
            if as_of is None or as_of == judged_as_of:
                continue  # nothing ingested yet, or no message since the day judged before
            judged_as_of = as_of
            with conn.transaction():
                judged = decay(conn, as_of, key, window.run_id, settings, window.shard)
            counts.as_of = judged.as_of.isoformat()
            counts.archived += sum(judged.archived.values())
            counts.archived_by_reason.update(judged.archived)
            counts.kept_by_reason.update(judged.kept)
            counts.score_distribution = judged.distribution()
    # only the reasons that happened
    counts.archived_by_reason = Counter({k: v for k, v in counts.archived_by_reason.items() if v})
    counts.kept_by_reason = Counter({k: v for k, v in counts.kept_by_reason.items() if v})
    return StageReport(counts)

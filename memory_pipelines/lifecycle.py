"""The end of a memory's life: the archive (rows moved in, listed, restored), what decay
would do (`judge_decay`, by each user's clock: the decay stage, the API and search read it),
forgetting on request, PII expiry and export of knowledge entries as Markdown. The decay
stage itself (`stages/decay.py`) archives what `judge_decay` decides."""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from memory_pipelines.db import lifecycle as lifecycle_db
from memory_pipelines.db import turns as turns_db
from memory_pipelines.db.rows import grouped
from memory_pipelines.config import DecaySettings
from memory_pipelines.core.knowledge_entries import DecayCandidate, DecayVerdict, Triple, plan_decay, superseded_by
from memory_pipelines.pii import sanitize
from memory_pipelines.shards import ALL_USERS, Shard

# the tables whose rows record accesses (decay's boost and disuse)
ACCESS_COUNTED = ("knowledge_entries", "memory_facts")


def move_to_archive(conn: psycopg.Connection, table: str, rows: list[dict], partition_key: str, run_id: str) -> None:
    """Move `rows` of `table` (id, key, reason, score, as_of: the moment each was judged from)
    to memory_archive (the decay stage and PII expiry archive through it)."""
    if not rows:
        return
    lifecycle_db.archive_rows(conn, table, rows, partition_key, run_id)


def user_clocks(conn: psycopg.Connection, user_ids: Sequence[str], before: datetime) -> dict[str, datetime]:
    """Each user's newest message before `before`: the "now" their memory ages by."""
    return lifecycle_db.user_clocks(conn, user_ids, before)


def judge_decay(conn: psycopg.Connection, as_of: datetime, settings: DecaySettings,
                user_id: str | None = None, shard: Shard = ALL_USERS, run_id: str | None = None) -> list[DecayVerdict]:
    """What decay would do to every knowledge entry and visible fact seen by `as_of` (of one
    user, given one; of the shard's users), each as of its user's newest message by then,
    archiving nothing. Rows run `run_id` stored are kept."""
    candidates = lifecycle_db.decay_candidates(conn, as_of, user_id, shard)
    users = sorted({c.user_id for c in candidates if c.user_id is not None})
    triples = lifecycle_db.graph_statements(conn, users, all_users=False)
    # a moment past as_of: the clock counts the message at as_of itself
    clocks = user_clocks(conn, users, as_of + timedelta(microseconds=1))
    return _verdicts(candidates, triples, as_of, settings, clocks, run_id)


def _verdicts(candidates: Sequence[DecayCandidate], triples: Sequence[Triple], as_of: datetime,
              settings: DecaySettings, clocks: dict[str, datetime], run_id: str | None) -> list[DecayVerdict]:
    return plan_decay(candidates, triples, as_of, min_age=timedelta(days=settings.min_age_days),
                      threshold=settings.threshold, base_rate=settings.base_rate, decay_facts=settings.decay_facts,
                      pii_retention=timedelta(days=settings.pii_retention_days), clocks=clocks, run_id=run_id)


NO_LATER_THAN = datetime.max.replace(tzinfo=UTC)  # rows read again as they are now, whenever last seen


class DecayRange:
    """What decay judges over consecutive days, read once: every row it may archive (seen
    by `seen_by`, by default the shard's newest message before `end`), its users' clocks
    before `start`, their entity graph and the error memories with a TTL; then each user's
    newest message of each day, a month of days at a time. The days are judged in memory,
    in order (`advance`, `judge`, `expired`), and what one archives leaves the rest
    (`drop`): a long backfill's decay costs its rows, not reads per day. Rows run `run_id`
    stored are kept."""

    CLOCK_DAYS = timedelta(days=31)  # the days of clocks read at a time: memory stays users × a month

    def __init__(self, conn: psycopg.Connection, start: datetime, end: datetime, settings: DecaySettings,
                 shard: Shard, run_id: str, seen_by: datetime | None = None) -> None:
        self.settings, self.run_id = settings, run_id
        self._conn, self._shard, self._read_to, self._end = conn, shard, start, end
        self._pending: deque[tuple[str, datetime]] = deque()  # (user, newest of a day) read, not yet passed
        self.clock = lifecycle_db.newest_message_before(conn, start, shard)  # the shard's, as advanced
        self.last = lifecycle_db.newest_message_before(conn, end, shard) if end > start else self.clock
        seen_by = seen_by or self.last
        rows = lifecycle_db.decay_candidates(conn, seen_by, None, shard) if seen_by else []
        self._position = {(c.source_table, c.id): i for i, c in enumerate(rows)}
        self._rows = grouped((c.user_id, c) for c in rows)  # by user (None: rows of no user)
        self._errors = lifecycle_db.decay_error_candidates(conn, seen_by, run_id, shard) if seen_by else []
        self._gone: set[tuple[str, int]] = set()
        users = sorted(u for u in self._rows if u is not None)
        self._triples = grouped((t.user_id, t) for t in lifecycle_db.graph_statements(conn, users, all_users=False))
        self.clocks = user_clocks(conn, sorted({*users, *(e["user_id"] for e in self._errors)}), start)

    def advance(self, end: datetime) -> datetime | None:
        """Move the clocks past every message before `end` (asked in order); the shard's clock."""
        while self._read_to < min(end, self._end):
            until = min(self._read_to + self.CLOCK_DAYS, self._end)
            self._pending.extend(lifecycle_db.newest_messages_by_user_day(self._conn, self._read_to, until,
                                                                          self._shard))
            self._read_to = until
        while self._pending and self._pending[0][1] < end:
            user, self.clock = self._pending.popleft()
            self.clocks[user] = self.clock
        return self.clock

    def judge(self, as_of: datetime, changed_since: datetime | None = None) -> list[DecayVerdict]:
        """Every row seen by `as_of` (the clocks advanced to it), each by its user's clock;
        with `changed_since` (the moment judged before) only rows of no user and of users who
        wrote since: a user's verdicts follow from their own clock and rows, which only their
        messages move. The rows it would archive are read again first (`_reread`)."""
        users = [u for u in self._rows if u is not None and (
            changed_since is None or self.clocks.get(u, changed_since) > changed_since)]
        while True:
            rows = sorted((c for u in (None, *users) for c in self._rows.get(u, ())
                           if c.seen_at <= as_of and (c.source_table, c.id) not in self._gone),
                          key=lambda c: self._position[(c.source_table, c.id)])
            judged = sorted({c.user_id for c in rows if c.user_id is not None})
            verdicts = _verdicts(rows, [t for u in judged for t in self._triples.get(u, ())], as_of, self.settings,
                                 {u: self.clocks[u] for u in judged if u in self.clocks}, self.run_id)
            if not self._reread([v.candidate for v in verdicts if v.archived]):
                return verdicts

    def _reread(self, rows: Sequence[DecayCandidate]) -> bool:
        """Whether another transaction changed or removed any of `rows` since they were read
        (a search counted an access, a run observed one again): those are taken as they are
        now, so nothing is archived that judging from the database at that moment keeps."""
        if not rows:
            return False
        now = {(c.source_table, c.id): c for c in lifecycle_db.decay_candidates(
            self._conn, NO_LATER_THAN, None, self._shard, ids=sorted({c.id for c in rows}))}
        changed = [c for c in rows if now.get((c.source_table, c.id)) != c]
        for c in changed:
            key = (c.source_table, c.id)
            if key in now:
                self._rows[c.user_id] = [now[key] if (r.source_table, r.id) == key else r
                                         for r in self._rows[c.user_id]]
            else:
                self._gone.add(key)
        return bool(changed)

    def expired(self, as_of: datetime) -> list[dict]:
        """Error memories seen by `as_of` whose TTL their user's clock has passed, as archive
        rows; read again first, as `judge` does (a search hit extends a TTL)."""
        while True:
            rows = [e for e in self._errors if e["observed_at"] <= as_of and e["expires_at"] is not None
                    and (clock := self.clocks.get(e["user_id"])) is not None and e["expires_at"] <= clock]
            now = {e["id"]: e for e in lifecycle_db.decay_error_candidates(
                self._conn, NO_LATER_THAN, self.run_id, self._shard, ids=[e["id"] for e in rows])} if rows else {}
            if all(now.get(e["id"]) == e for e in rows):
                return [{"id": e["id"], "key": e["key"], "reason": "ttl", "score": None,
                         "as_of": self.clocks[e["user_id"]].isoformat()} for e in rows]
            changed = {e["id"] for e in rows if now.get(e["id"]) != e}
            self._errors = [now[e["id"]] if e["id"] in changed else e for e in self._errors
                            if e["id"] not in changed or e["id"] in now]

    def drop(self, table: str, ids: Collection[int]) -> None:
        """Rows archived: no later day judges them again."""
        if table == "error_memory":
            self._errors = [e for e in self._errors if e["id"] not in ids]
        else:
            self._gone |= {(table, i) for i in ids}


def restore(conn: psycopg.Connection, archive_id: int) -> list[tuple[str, int]]:
    """Put an archived row back where it was (with the hidden fact rows archived with it),
    counted as accessed now: decay keeps what someone brought back for its minimum age."""
    restored = lifecycle_db.restore_archived(conn, archive_id)
    if not restored:
        raise LookupError(f"no archived row {archive_id}")
    for table, source_id in restored:
        if table in ACCESS_COUNTED:
            lifecycle_db.touch_restored(conn, table, source_id)
    return restored


@dataclass(frozen=True)
class ArchiveSelection:
    """Which archive rows: every field given must match (ids: any of them)."""
    reason: str | None = None
    since: datetime | None = None  # archived at or after
    run_id: str | None = None  # the run that archived them
    user_id: str | None = None
    ids: tuple[int, ...] = ()
    limit: int | None = None
    with_followers: bool = True  # hidden fact rows, which come back with their survivor

    @property
    def empty(self) -> bool:
        return not (self.reason or self.since or self.run_id or self.user_id or self.ids)


@dataclass(frozen=True)
class ArchivedRow:
    id: int
    source_table: str
    source_id: int
    source_key: str | None
    user_id: str | None
    session_id: str | None
    reason: str
    score: float | None
    as_of: datetime
    archived_at: datetime
    run_id: str
    label: str


def archived_rows(conn: psycopg.Connection, selection: ArchiveSelection) -> list[ArchivedRow]:
    return [ArchivedRow(**row) for row in lifecycle_db.archived_rows(
        conn, reason=selection.reason, since=selection.since, run_id=selection.run_id, user_id=selection.user_id,
        ids=selection.ids, limit=selection.limit, with_followers=selection.with_followers)]


@dataclass(frozen=True)
class Restored:
    row: ArchivedRow
    restored: tuple[tuple[str, int], ...]  # (table, id) put back: the row and its hidden fact rows
    conflict: str | None = None  # why it could not come back (a live row holds its place)


def restore_selected(conn: psycopg.Connection, selection: ArchiveSelection) -> list[Restored]:
    """Restore every selected archive row (hidden fact rows come back with their survivor),
    each in a savepoint: one whose place a live row took is reported, the rest go on. The
    caller's transaction decides: roll it back for a dry run."""
    results = []
    for row in archived_rows(conn, replace(selection, with_followers=False)):
        try:
            with conn.transaction():
                results.append(Restored(row, tuple(restore(conn, row.id))))
        except psycopg.errors.UniqueViolation as exc:
            results.append(Restored(row, (), f"a live row holds its place ({exc.diag.constraint_name})"))
    return results


def forget(conn: psycopg.Connection, user_id: str, session_id: str | None = None) -> dict[str, int]:
    """Delete a user's (or one of their sessions') messages and everything derived from
    them, through the lineage columns, in the caller's transaction; record a tombstone so
    ingestion does not bring them back. Returns the rows removed per table."""
    removed = lifecycle_db.forget_rows(conn, user_id, session_id)
    lifecycle_db.record_forgotten(conn, user_id, session_id or "")
    turns_db.refresh_turn_stats(conn, [user_id])  # what the user's remaining turns count
    return removed


def unforget(conn: psycopg.Connection, user_id: str, session_id: str | None = None) -> bool:
    """Lift a tombstone, so the transcripts can be ingested again on purpose."""
    return lifecycle_db.unforget(conn, user_id, session_id or "")


_SLUG = re.compile(r"[^a-z0-9]+")


def _yaml(value) -> str:
    # JSON scalars and lists are valid YAML flow values
    return json.dumps(value, ensure_ascii=False, default=str)


def export_markdown(conn: psycopg.Connection, out_dir: Path, user_id: str | None = None) -> list[Path]:
    """One Markdown file per knowledge entry (the user's and global ones, or all), with YAML
    frontmatter, sanitized; `status` says whether a newer statement overrides it (outdated,
    with `superseded_by`) or not (current). File names are built from the entry only, never
    from input, so nothing is written outside `out_dir`."""
    out_dir = out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    entries = lifecycle_db.export_entries(conn, user_id)
    triples = lifecycle_db.graph_statements(conn, [user_id], all_users=user_id is None)
    for e in entries:
        newer = superseded_by(f"{e['title']} {e['content']}", e["user_id"], e["updated_at"], triples)
        title, content = sanitize(e["title"]).text, sanitize(e["content"]).text
        slug = _SLUG.sub("-", title.casefold()).strip("-")[:60] or "entry"
        path = out_dir / f"{e['kind']}-{slug}-{e['entry_key'][:10]}.md"
        lineage = {k: e[k] for k in ("session_id", "seq_start", "seq_end", "partition_key", "run_id", "model",
                                     "prompt_version")}
        front = {"kind": e["kind"], "title": title, "tags": list(e["tags"]), "scope": e["scope"],
                 "scope_id": e["scope_id"], "version": e["version"], "confidence": round(e["confidence"], 3),
                 "importance": round(e["importance"], 3), "valid_until": e["valid_until"],
                 "consent_basis": e["consent_basis"], "updated_at": e["updated_at"],
                 "status": "outdated" if newer else "current", "superseded_by": newer, "lineage": lineage}
        lines = ["---", *(f"{k}: {_yaml(v)}" for k, v in front.items()), "---", "", f"# {title}", "", content, ""]
        path.write_text("\n".join(lines), encoding="utf-8")
        written.append(path)
    return written


def pii_entries(conn: psycopg.Connection, user_id: str | None = None) -> list[dict]:
    """Knowledge entries that held PII (sanitized before they were stored), to list or count."""
    return lifecycle_db.pii_entries(conn, user_id)


def expire_pii_older_than(conn: psycopg.Connection, age: timedelta, as_of: datetime, run_id: str = "manual") -> int:
    """Archive (reason pii_retention) entries that held PII and were last seen before `as_of - age`."""
    old = [{"id": e["id"], "key": e["entry_key"], "reason": "pii_retention", "score": None, "as_of": as_of.isoformat()}
           for e in pii_entries(conn) if e["updated_at"] < as_of - age]
    move_to_archive(conn, "knowledge_entries", old, as_of.date().isoformat(), run_id)
    return len(old)

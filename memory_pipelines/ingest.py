"""Deciding what a transcript scan adds to the archive (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from memory_pipelines.records import (
    ForkPoint, IngestPlan, Message, QuarantinedRecord, QuarantineReason, StoredMessage, TranscriptScan,
)
from memory_pipelines.shards import Shard


def scan_of_shard(scan: TranscriptScan, shard: Shard) -> tuple[TranscriptScan, int]:
    """The part of a scan a shard's run ingests: its users' messages, and the refused
    records on shard 0 alone (a record refused while reading names no user to shard it by),
    with how many records it leaves to the other shards' runs."""
    if shard.count == 1:
        return scan, 0
    mine = tuple(m for m in scan.messages if shard.holds(m.user_id))
    refused = scan.quarantined if shard.index == 0 else ()
    return replace(scan, messages=mine, quarantined=refused), scan.read - len(mine) - len(refused)


def _refuse(message: Message, reason: QuarantineReason, detail: str) -> QuarantinedRecord:
    raw = f"session_id={message.session_id} seq={message.seq} user_id={message.user_id} role={message.role}: {message.content}"
    return QuarantinedRecord(
        source_file=message.source_file, source_line=message.source_line, reason=reason, detail=detail,
        raw=raw[:4000], raw_bytes=len(message.content.encode()), session_id=message.session_id, seq=message.seq,
    )


def plan_ingest(
    scan: TranscriptScan,
    stored: Mapping[tuple[str, int], StoredMessage],
    owners: Mapping[str, str],
    forgotten: frozenset[tuple[str, str]] = frozenset(),
    forks: Mapping[str, ForkPoint] | None = None,
    superseded: frozenset[tuple[str, int, str]] = frozenset(),
) -> IngestPlan:
    """Split a scan into new messages, re-sent duplicates and refused records.

    `stored` holds what the archive has under the scanned keys, `owners` each stored
    session's user (and each declared parent's), `forks` the fork points stored for them,
    `superseded` the (session, seq, hash) of turns a replace merge set aside (re-sent, they
    stay aside). Records are taken in file order, so the first of two conflicting records
    in one batch wins and the result is the same on every run.
    """
    known: dict[tuple[str, int], StoredMessage] = dict(stored)
    session_owner: dict[str, str] = dict(owners)
    fork_points: dict[str, ForkPoint] = dict(forks or {})
    # a parent may come in the same batch as its fork, in any file order
    batch_owner: dict[str, str] = {}
    for message in scan.messages:
        batch_owner.setdefault(message.session_id, message.user_id)
    new: list[Message] = []
    declared: list[ForkPoint] = []
    refused: list[QuarantinedRecord] = list(scan.quarantined)
    duplicates = skipped = aside = 0
    for message in scan.messages:
        if (message.user_id, "") in forgotten or (message.user_id, message.session_id) in forgotten:
            skipped += 1
            continue
        if (message.session_id, message.seq, message.content_hash) in superseded:
            aside += 1
            continue
        key = (message.session_id, message.seq)
        previous = known.get(key)
        if previous is not None:
            if previous.content_hash == message.content_hash:
                duplicates += 1
            else:
                refused.append(_refuse(
                    message, QuarantineReason.CONFLICTING_DUPLICATE,
                    f"({message.session_id}, {message.seq}) is already stored with different content",
                ))
            continue
        owner = session_owner.get(message.session_id, message.user_id)
        if owner != message.user_id:
            refused.append(_refuse(
                message, QuarantineReason.USER_MISMATCH,
                f"session {message.session_id} belongs to user {owner!r}, the record says {message.user_id!r}",
            ))
            continue
        fork = fork_points.get(message.session_id)
        problem = _fork_problem(message, fork, session_owner, batch_owner, fork_points)
        if problem is not None:
            refused.append(_refuse(message, *problem))
            continue
        if fork is None and message.parent_session_id is not None:
            fork = fork_points[message.session_id] = ForkPoint(
                message.session_id, message.parent_session_id, message.fork_seq, message.user_id)
            declared.append(fork)
        session_owner[message.session_id] = message.user_id
        known[key] = StoredMessage(message.content_hash, message.user_id)
        new.append(message)
    return IngestPlan(new=tuple(new), duplicates=duplicates, quarantined=tuple(refused), read=scan.read,
                      forgotten=skipped, superseded=aside, forks=tuple(declared))


def _fork_problem(message: Message, fork: ForkPoint | None, session_owner: Mapping[str, str],
                  batch_owner: Mapping[str, str], fork_points: Mapping[str, ForkPoint],
                  ) -> tuple[QuarantineReason, str] | None:
    """Why a record's fork point cannot stand (None: it can): a fork names one parent of the
    same user, a mainline session, and its own turns come after the shared ones."""
    session, parent = message.session_id, message.parent_session_id
    if fork is not None:
        if parent is not None and (parent, message.fork_seq) != (fork.parent_session_id, fork.fork_seq):
            return QuarantineReason.FORK_MISMATCH, (
                f"session {session} forks {fork.parent_session_id} after seq {fork.fork_seq}; "
                f"the record says {parent} after seq {message.fork_seq}")
    elif parent is not None:
        if session in session_owner:
            return QuarantineReason.FORK_MISMATCH, (
                f"session {session} is stored as a session of its own: a fork names its parent from its first record")
        if parent == session:
            return QuarantineReason.FORK_MISMATCH, f"session {session} names itself as its parent"
        if parent in fork_points:
            return QuarantineReason.FORK_MISMATCH, (
                f"{parent} is itself a fork (of {fork_points[parent].parent_session_id}): fork that session instead")
        parent_owner = session_owner.get(parent, batch_owner.get(parent))
        if parent_owner is None:
            return QuarantineReason.FORK_MISMATCH, (
                f"parent session {parent} is not in the archive: ingest it first or with its fork")
        if parent_owner != message.user_id:
            return QuarantineReason.USER_MISMATCH, (
                f"session {session} forks {parent} of user {parent_owner!r}, the record says {message.user_id!r}")
        fork = ForkPoint(session, parent, message.fork_seq, message.user_id)
    if fork is not None and message.seq <= fork.fork_seq:
        return QuarantineReason.FORK_MISMATCH, (
            f"session {session} forks {fork.parent_session_id} after seq {fork.fork_seq}: its own turns start "
            f"at seq {fork.fork_seq + 1} (the shared ones are {fork.parent_session_id}'s), got seq {message.seq}")
    return None

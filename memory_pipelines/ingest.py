"""Deciding what a transcript scan adds to the archive (pure: no I/O)."""

from __future__ import annotations

from collections.abc import Mapping

from memory_pipelines.records import IngestPlan, Message, QuarantinedRecord, QuarantineReason, StoredMessage, TranscriptScan


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
) -> IngestPlan:
    """Split a scan into new messages, re-sent duplicates and refused records.

    `stored` holds what the archive has for the scanned sessions, `owners` each stored
    session's user. Records are taken in file order, so the first of two conflicting
    records in one batch wins and the result is the same on every run.
    """
    known: dict[tuple[str, int], StoredMessage] = dict(stored)
    session_owner: dict[str, str] = dict(owners)
    new: list[Message] = []
    refused: list[QuarantinedRecord] = list(scan.quarantined)
    duplicates = skipped = 0
    for message in scan.messages:
        if (message.user_id, "") in forgotten or (message.user_id, message.session_id) in forgotten:
            skipped += 1
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
        owner = session_owner.setdefault(message.session_id, message.user_id)
        if owner != message.user_id:
            refused.append(_refuse(
                message, QuarantineReason.USER_MISMATCH,
                f"session {message.session_id} belongs to user {owner!r}, the record says {message.user_id!r}",
            ))
            continue
        known[key] = StoredMessage(message.content_hash, message.user_id)
        new.append(message)
    return IngestPlan(new=tuple(new), duplicates=duplicates, quarantined=tuple(refused), read=scan.read,
                      forgotten=skipped)

"""Frozen dataclasses passed between stages and the repository layer."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

ROLES = ("user", "assistant", "tool", "system")


class QuarantineReason(StrEnum):
    """Why a transcript record was refused. The values are stored in `quarantine.reason`."""

    MALFORMED_JSON = "malformed_json"
    NOT_AN_OBJECT = "not_an_object"
    MISSING_FIELD = "missing_field"
    INVALID_TYPE = "invalid_type"
    UNKNOWN_ROLE = "unknown_role"
    INVALID_TIMESTAMP = "invalid_timestamp"
    INVALID_UTF8 = "invalid_utf8"
    NUL_BYTE = "nul_byte"
    TOO_LARGE = "too_large"
    UNREADABLE_FILE = "unreadable_file"
    CONFLICTING_DUPLICATE = "conflicting_duplicate"
    USER_MISMATCH = "user_mismatch"


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Half-open [start, end) in UTC."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("TimeWindow bounds must be timezone-aware")
        if self.end <= self.start:
            raise ValueError(f"empty window: {self.start} .. {self.end}")


@dataclass(frozen=True, slots=True)
class Message:
    session_id: str
    seq: int
    user_id: str
    role: str
    content: str
    ts: datetime
    content_hash: str
    source_file: str
    source_line: int
    agent_id: str | None = None
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    tool_call_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QuarantinedRecord:
    source_file: str
    source_line: int
    reason: QuarantineReason
    detail: str
    raw: str
    raw_bytes: int
    session_id: str | None = None
    seq: int | None = None


@dataclass(frozen=True, slots=True)
class TranscriptScan:
    """The records a scan attributed to one window: valid messages and refused records."""

    window: TimeWindow
    messages: tuple[Message, ...]
    quarantined: tuple[QuarantinedRecord, ...]
    files: int

    @property
    def read(self) -> int:
        return len(self.messages) + len(self.quarantined)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """What the archive already holds for a (session_id, seq)."""

    content_hash: str
    user_id: str


@dataclass(frozen=True, slots=True)
class IngestPlan:
    new: tuple[Message, ...]
    duplicates: int
    quarantined: tuple[QuarantinedRecord, ...]
    read: int

    def __post_init__(self) -> None:
        if self.read != len(self.new) + self.duplicates + len(self.quarantined):
            raise AssertionError("ingest counts do not add up")

"""The records passed between stages and the database layer: frozen dataclasses of messages,
segments, summaries, facts, chunks and windows (no models here: those are in `llm` and `embed`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from functools import cache
from typing import Any

from memory_pipelines.digests import json_digest

ROLES = ("user", "assistant", "tool", "system")


@cache
def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(kind))


def shallow_fields(record: Any) -> dict[str, Any]:
    """A dataclass's fields by name, values as they are: a row to write. (`asdict` deep-copies
    every value, a tenth of a stage's time on rows written by the hundred thousand.)"""
    return {name: getattr(record, name) for name in _field_names(type(record))}


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
    FORK_MISMATCH = "fork_mismatch"
    UNMAPPED = "unmapped"


# what unified search can be narrowed to
SEARCH_SCOPES = ("all", "facts", "raw", "sketches", "knowledge")
# how transcript files are read (memory_pipelines.formats, docs/formats.md)
# who wrote a message (Message.speaker), and who a role's messages are written by by default
SPEAKERS = ("human", "agent", "tool", "system")
SPEAKER_OF_ROLE = {"user": "human", "assistant": "agent", "tool": "tool", "system": "system"}
# a source event that is no turn (formats' `_skipped`): counted by kind, not quarantined
SKIPPED_EVENT = "skipped_event"
TRANSCRIPT_FORMATS = ("canonical", "openai", "agent-events", "chat-export", "codex", "aider")
# how a fork's turns come into its parent (memory_pipelines.forks)
MERGE_MODES = ("append", "replace", "summarize")
# what an agent reads of one search by default: about 1,500 tokens, the range memory services
# serve (about 1,800 tokens for mem0, 3,900 for Zep)
DEFAULT_BUDGET_CHARS = 6000
# why a row left its table for memory_archive (the table's CHECK constraint holds the same)
ARCHIVE_REASONS = ("decayed", "expired", "ttl", "pii_retention", "merged_with")


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


# not frozen: a frozen dataclass sets each field through object.__setattr__, eight times the
# cost of its __init__, and a run builds every message once per stage that reads it
@dataclass(slots=True)
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
    # a fork's records name the session it branched from and the last turn they share
    parent_session_id: str | None = None
    fork_seq: int | None = None

    @property
    def speaker(self) -> str:
        """Who wrote the message: `human`, `agent`, `tool` or `system`. A format records it in
        metadata where the role says otherwise (a subagent's brief is a user turn an agent
        wrote; an interruption notice is a user turn the harness wrote)."""
        said = self.metadata.get("speaker")
        return said if said in SPEAKERS else SPEAKER_OF_ROLE.get(self.role, "system")


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
    skipped_files: tuple[str, ...] = ()  # files of no transcript kind in the folder, not read
    # source events that are no turn (a snapshot, a notice), by kind: counted, not quarantined
    skipped_events: tuple[tuple[str, int], ...] = ()

    @property
    def read(self) -> int:
        return len(self.messages) + len(self.quarantined)


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """What the archive already holds for a (session_id, seq)."""

    content_hash: str
    user_id: str


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """A forked session: its timeline is the parent's turns up to fork_seq, then its own."""

    session_id: str
    parent_session_id: str
    fork_seq: int
    user_id: str


@dataclass(frozen=True, slots=True)
class IngestPlan:
    new: tuple[Message, ...]
    duplicates: int
    quarantined: tuple[QuarantinedRecord, ...]
    read: int
    forgotten: int = 0  # records of users or sessions forgotten on request: not ingested again
    superseded: int = 0  # re-sent parent turns a replace merge set aside: they stay aside
    forks: tuple[ForkPoint, ...] = ()  # fork points the new records declare

    def __post_init__(self) -> None:
        if self.read != len(self.new) + self.duplicates + len(self.quarantined) + self.forgotten + self.superseded:
            raise AssertionError("ingest counts do not add up")


SUMMARY_FIELDS = ("key_decisions", "past_discussions", "current_discussion", "keys", "language")
MAX_KEY_DECISIONS = 8
MAX_PAST_DISCUSSIONS = 12
MAX_KEYS = 40


class SummaryFormatError(ValueError):
    """A summary (from a model or the database) does not have the expected shape."""


@dataclass(frozen=True, slots=True)
class Summary:
    """A session's rolling summary, as in the Agenvoy design."""

    key_decisions: tuple[str, ...] = ()
    past_discussions: tuple[str, ...] = ()
    current_discussion: str = ""
    keys: tuple[str, ...] = ()
    language: str = "auto"

    def to_json(self) -> dict[str, Any]:
        return {
            "key_decisions": list(self.key_decisions),
            "past_discussions": list(self.past_discussions),
            "current_discussion": self.current_discussion,
            "keys": list(self.keys),
            "language": self.language,
        }

    @classmethod
    def from_json(cls, data: Any) -> "Summary":
        """Validate and normalize: decisions must start with `Do: ` or `Don't: ` (others are
        dropped), lists are capped, the newest entries kept."""
        if not isinstance(data, dict):
            raise SummaryFormatError(f"a summary must be a JSON object, got {type(data).__name__}")

        def strings(name: str) -> list[str]:
            value = data.get(name, [])
            if value is None:
                return []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise SummaryFormatError(f"summary field {name!r} must be a list of strings")
            return [" ".join(v.split()) for v in value if v.strip()]

        current = data.get("current_discussion", "") or ""
        language = data.get("language", "auto") or "auto"
        if not isinstance(current, str) or not isinstance(language, str):
            raise SummaryFormatError("summary fields current_discussion and language must be strings")
        decisions = [d for d in strings("key_decisions") if d.startswith(("Do: ", "Don't: "))]
        return cls(
            key_decisions=tuple(_dedupe(decisions)[-MAX_KEY_DECISIONS:]),
            past_discussions=tuple(_dedupe(strings("past_discussions"))[-MAX_PAST_DISCUSSIONS:]),
            current_discussion=" ".join(current.split()),
            keys=tuple(_dedupe(strings("keys"), keep_first=True)[:MAX_KEYS]),
            language=language.strip() or "auto",
        )

    @property
    def is_empty(self) -> bool:
        return not (self.key_decisions or self.past_discussions or self.current_discussion or self.keys)


def _dedupe(items: list[str], keep_first: bool = False) -> list[str]:
    """One entry per case-folded text, in order. By default the last occurrence stays (a
    repeated decision counts as the newest); `keep_first` for lists ranked by importance."""
    seen: dict[str, int] = {}
    for index, item in enumerate(items):
        if not (keep_first and item.casefold() in seen):
            seen[item.casefold()] = index
    return [items[i] for i in sorted(seen.values())]


MEMORY_ITEM_LISTS = ("facts", "entries", "relations")


@dataclass(frozen=True, slots=True)
class Distillation:
    """A summarized chunk's memory as one distillation call wrote it: the updated summary,
    and the facts, knowledge entries and relations as the model gave them (JSON values; the
    stages that store them judge them item by item, so a bad item never costs the summary)."""

    summary: Summary
    facts: Any = ()
    entries: Any = ()
    relations: Any = ()

    def items_json(self) -> dict[str, Any]:
        """The item lists as stored with the summary version."""
        return {name: list(value) if isinstance(value, tuple) else value
                for name in MEMORY_ITEM_LISTS for value in [getattr(self, name)]}

    def to_json(self) -> dict[str, Any]:
        return {"summary": self.summary.to_json(), **self.items_json()}

    @classmethod
    def from_json(cls, data: Any) -> "Distillation":
        """A distillation answer: its summary must hold (SummaryFormatError otherwise); a
        missing item list is an empty one."""
        if not isinstance(data, dict):
            raise SummaryFormatError(f"a distillation must be a JSON object, got {type(data).__name__}")
        return cls(Summary.from_json(data.get("summary")),
                   *(data[name] if data.get(name) is not None else [] for name in MEMORY_ITEM_LISTS))


@dataclass(frozen=True, slots=True)
class Segment:
    """One user message and the assistant and tool messages after it, up to the next user
    message; a run of replies before the first user message in a window is a segment too."""

    session_id: str
    user_id: str
    messages: tuple[Message, ...]

    @property
    def start_seq(self) -> int:
        return self.messages[0].seq

    @property
    def end_seq(self) -> int:
        return self.messages[-1].seq

    @property
    def segment_id(self) -> str:
        return f"{self.session_id}:{self.start_seq}"


@dataclass(frozen=True, slots=True)
class NoiseVerdict:
    noise: bool
    confidence: float
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class TurnRow:
    """One unit of the turn-level index: a message as search reads it (memory_pipelines.core.turn_index)."""

    session_id: str
    seq: int
    user_id: str
    pos: int  # order among the session's turns
    role: str
    ts: datetime
    language: str  # text search configuration
    body: str
    keys: tuple[str, ...]
    window_hash: str  # of the text its embedding is made of

    @property
    def content_hash(self) -> str:
        parts = [self.user_id, self.pos, self.role, self.ts.isoformat(), self.language, self.body, list(self.keys)]
        return json_digest(parts, ensure_ascii=False)


"""Knowledge entries (navra): typed, content-addressed, importance-weighted, scoped, with
temporal validity, PII flags and a consent basis; the entity graph; error memory; decay."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import jsonschema

from memory_pipelines.models import Message
from memory_pipelines.pii import sanitize
from memory_pipelines.rules.text import clip

KINDS = ("fact", "event", "instruction", "insight", "user", "project")
IMPORTANCE = {"insight": 0.8, "instruction": 0.7, "user": 0.6, "project": 0.6, "fact": 0.5, "event": 0.3}
SCOPES = ("entity", "process", "session", "global")
CONSENT = ("legitimate_interest", "consent", "legal_obligation", "vital_interest", "public_task", "not_set")
# relations a subject holds one value of at a time: a newer object closes the older triple
FUNCTIONAL_RELATIONS = {"works_at", "reports_to", "listens_on", "deployed_on", "uses_database", "lives_in"}
ERROR_TTL = timedelta(days=90)

ENTRY_SCHEMA = {
    "type": "object",
    "required": ["kind", "title", "content"],
    "properties": {
        "kind": {"enum": list(KINDS)},
        "title": {"type": "string", "minLength": 1, "maxLength": 200},
        "content": {"type": "string", "minLength": 1, "maxLength": 4000},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 60}, "maxItems": 20},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "scope": {"enum": list(SCOPES)},
        "scope_id": {"type": ["string", "null"], "maxLength": 200},
        "seq": {"type": ["integer", "null"]},
    },
}
RELATION_SCHEMA = {
    "type": "object",
    "required": ["subject", "relation", "object"],
    "properties": {
        "subject": {"type": "string", "minLength": 1, "maxLength": 200},
        "relation": {"type": "string", "minLength": 1, "maxLength": 60, "pattern": r"^\w+$"},
        "object": {"type": "string", "minLength": 1, "maxLength": 200},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "seq": {"type": ["integer", "null"]},
    },
}
_ENTRY = jsonschema.Draft202012Validator(ENTRY_SCHEMA)
_RELATION = jsonschema.Draft202012Validator(RELATION_SCHEMA)


def entry_key(kind: str, title: str, scope: str, scope_id: str | None) -> str:
    """sha256 over (kind, title) — and the scope, so two users' entries never share a key."""
    normalized = " ".join(title.casefold().split())
    return hashlib.sha256(json.dumps([kind, normalized, scope, scope_id or ""]).encode()).hexdigest()


def importance(kind: str, confidence: float) -> float:
    return round(IMPORTANCE[kind] * confidence, 4)


@dataclass(frozen=True)
class EntryCandidate:
    key: str
    kind: str
    title: str
    content: str
    tags: tuple[str, ...]
    confidence: float
    importance: float
    scope: str
    scope_id: str | None
    user_id: str | None
    has_pii: bool
    pii_kinds: tuple[str, ...]
    consent_basis: str
    observed_at: datetime
    valid_until: datetime | None
    seq_start: int
    seq_end: int

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(json.dumps([self.title, self.content, list(self.tags)]).encode()).hexdigest()


@dataclass(frozen=True)
class RelationCandidate:
    subject: str
    relation: str
    object: str
    confidence: float
    valid_from: datetime
    seq_start: int
    seq_end: int


def prepare(raw: dict, messages: Sequence[Message], session_id: str, user_id: str, *, sanitize_pii: bool = True,
            ttl_seconds: int | None = None, consent_basis: str = "not_set",
            ) -> tuple[list[EntryCandidate], list[RelationCandidate], list[str]]:
    """Validate synthesized entries and relations (an invalid one is dropped with its
    reason), assign importance, scope, validity and key, and sanitize PII."""
    by_seq = {m.seq: m for m in messages}
    first, last = min(by_seq), max(by_seq)
    entries, relations, problems = [], [], []
    raw = raw if isinstance(raw, dict) else {}
    for item in raw.get("entries") or []:
        error = next(iter(_ENTRY.iter_errors(item)), None)
        if error is not None or (item.get("seq") is not None and item["seq"] not in by_seq):
            problems.append(f"entry dropped: {error.message if error else 'unknown seq'}"[:200])
            continue
        anchor = by_seq.get(item.get("seq"), by_seq[last])
        scope = item.get("scope") or ("session" if item["kind"] == "event" else "entity")
        scope_id = {"entity": user_id, "session": session_id, "global": None}.get(scope, item.get("scope_id"))
        if scope == "process" and not scope_id:
            problems.append("entry dropped: a process-scoped entry needs scope_id")
            continue
        title, content = item["title"].strip(), item["content"].strip()
        kinds: tuple[str, ...] = ()
        if sanitize_pii:
            clean_title, clean_content = sanitize(title), sanitize(content)
            title, content = clean_title.text, clean_content.text
            kinds = tuple(sorted(set(clean_title.kinds) | set(clean_content.kinds)))
        confidence = float(item.get("confidence", 0.7))
        seq = item.get("seq")
        entries.append(EntryCandidate(
            key=entry_key(item["kind"], title, scope, scope_id), kind=item["kind"], title=clip(title, 200),
            content=content, tags=tuple(dict.fromkeys(t.strip().lower() for t in item.get("tags") or [] if t.strip())),
            confidence=confidence, importance=importance(item["kind"], confidence), scope=scope, scope_id=scope_id,
            user_id=None if scope == "global" else user_id, has_pii=bool(kinds), pii_kinds=kinds,
            consent_basis=consent_basis, observed_at=anchor.ts,
            valid_until=anchor.ts + timedelta(seconds=ttl_seconds) if ttl_seconds else None,
            seq_start=seq if seq is not None else first, seq_end=seq if seq is not None else last,
        ))
    for item in raw.get("relations") or []:
        error = next(iter(_RELATION.iter_errors(item)), None)
        if error is not None or (item.get("seq") is not None and item["seq"] not in by_seq):
            problems.append(f"relation dropped: {error.message if error else 'unknown seq'}"[:200])
            continue
        seq = item.get("seq")
        anchor = by_seq.get(seq, by_seq[last])
        subject = user_id if item["subject"] == "user" else item["subject"]
        relations.append(RelationCandidate(subject, item["relation"], item["object"],
                                           float(item.get("confidence", 0.7)), anchor.ts,
                                           seq if seq is not None else first, seq if seq is not None else last))
    return entries, relations, problems


@dataclass(frozen=True)
class ErrorFix:
    tool: str
    error: str
    fix: str
    error_hash: str
    error_seq: int
    fix_seq: int
    observed_at: datetime


def resolved_errors(messages: Sequence[Message]) -> list[ErrorFix]:
    """A failed tool result followed later in the session by a successful call of the same
    tool: (tool, error, fix), the fix being that call and what the assistant said before it."""
    ordered = sorted(messages, key=lambda m: m.seq)
    calls = {m.tool_call_id: m for m in ordered if m.role == "assistant" and m.tool_call_id}
    found: list[ErrorFix] = []
    for i, failed in enumerate(ordered):
        if failed.role != "tool" or not failed.metadata.get("is_error"):
            continue
        for later in ordered[i + 1:]:
            if later.role == "tool" and later.tool_name == failed.tool_name and not later.metadata.get("is_error"):
                call = calls.get(later.tool_call_id)
                args = json.dumps(call.tool_args or {}, ensure_ascii=False, sort_keys=True) if call else "{}"
                said = " ".join(m.content for m in ordered if failed.seq < m.seq < later.seq
                                and m.role == "assistant" and m.content.strip())
                fix = clip(f"{said} → {failed.tool_name}({args})" if said else f"{failed.tool_name}({args})", 600)
                error = clip(failed.content, 600)
                digest = hashlib.sha256(" ".join(error.casefold().split()).encode()).hexdigest()
                found.append(ErrorFix(failed.tool_name or "tool", error, fix, digest, failed.seq, later.seq, later.ts))
                break
    return found


def decay_score(importance: float, age_hours: float, access_count: int, base_rate: float) -> float:
    """navra's FadeMem score: importance · e^(−rate·age) + boost, where rate =
    base_rate / (1 + importance) and the boost grows with accesses, capped at 0.3."""
    rate = base_rate / (1 + importance)
    boost = min(0.3, 0.1 * math.log1p(max(0, access_count)))
    return importance * math.exp(-rate * max(0.0, age_hours)) + boost

"""Knowledge entries (navra): typed, content-addressed, importance-weighted, scoped, with
temporal validity, PII flags and a consent basis; the entity graph; error memory; decay."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from memory_pipelines.config import CONSENT_BASES
from memory_pipelines.digests import json_digest
from memory_pipelines.formats import call_arguments
from memory_pipelines.json_schemas import JsonSchema, describe
from memory_pipelines.llm.prompts import ENTRY_KINDS as KINDS
from memory_pipelines.llm.prompts import ENTRY_SCHEMA, RELATION_SCHEMA
from memory_pipelines.llm.prompts import ENTRY_SCOPES as SCOPES
from memory_pipelines.records import Message
from memory_pipelines.pii import sanitize
from memory_pipelines.rules.text import clip

IMPORTANCE = {"insight": 0.8, "instruction": 0.7, "user": 0.6, "project": 0.6, "fact": 0.5, "event": 0.3}
CONSENT = CONSENT_BASES
# relations a subject holds one value of at a time: a newer object closes the older triple
FUNCTIONAL_RELATIONS = {"works_at", "reports_to", "listens_on", "deployed_on", "uses_database", "lives_in"}
ERROR_TTL = timedelta(days=90)
# kinds that bind the user (what they told us to do, who they are): only from turns the person wrote
USERS_OWN = ("instruction", "user")

_ENTRY = JsonSchema(ENTRY_SCHEMA)
_RELATION = JsonSchema(RELATION_SCHEMA)


def entry_key(kind: str, title: str, scope: str, scope_id: str | None) -> str:
    """sha256 over (kind, title) — and the scope, so two users' entries never share a key."""
    normalized = " ".join(title.casefold().split())
    return json_digest([kind, normalized, scope, scope_id or ""])


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
        return json_digest([self.title, self.content, list(self.tags)])


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
    reason), assign importance, scope, validity and key, and sanitize PII. An instruction or
    user entry citing a turn the person did not write (`Message.speaker`: a subagent's brief,
    harness text, an agent's or a tool's turn), or a relation of the user's citing a user
    turn the person did not write, is dropped: memory that binds the user is theirs only."""
    by_seq = {m.seq: m for m in messages}
    first, last = min(by_seq), max(by_seq)
    entries, relations, problems = [], [], []
    raw = raw if isinstance(raw, dict) else {}
    listed = {}
    for part in ("entries", "relations"):
        listed[part] = raw.get(part) or []
        if not isinstance(listed[part], list):
            problems.append(f"{part} dropped: not a list"[:200])
            listed[part] = []
    for item in listed["entries"]:
        error = _ENTRY.first_error(item)
        if error is not None or (item.get("seq") is not None and item["seq"] not in by_seq):
            problems.append(f"entry dropped: {describe(error) if error else 'unknown seq'}"[:200])
            continue
        cited = by_seq.get(item.get("seq"))
        if cited is not None and item["kind"] in USERS_OWN and cited.speaker != "human":
            problems.append(f"entry dropped: a {item['kind']} entry cites seq {cited.seq}, which the person did "
                            f"not write (speaker {cited.speaker})"[:200])
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
    for item in listed["relations"]:
        error = _RELATION.first_error(item)
        if error is not None or (item.get("seq") is not None and item["seq"] not in by_seq):
            problems.append(f"relation dropped: {describe(error) if error else 'unknown seq'}"[:200])
            continue
        seq = item.get("seq")
        if item["subject"] == "user" and seq in by_seq and by_seq[seq].role == "user" and by_seq[seq].speaker != "human":
            problems.append(f"relation dropped: about the user from seq {seq}, which the person did not write"[:200])
            continue
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
    calls = call_arguments(ordered)
    found: list[ErrorFix] = []
    for i, failed in enumerate(ordered):
        if failed.role != "tool" or not failed.metadata.get("is_error"):
            continue
        for later in ordered[i + 1:]:
            if later.role == "tool" and later.tool_name == failed.tool_name and not later.metadata.get("is_error"):
                args = json.dumps(calls.get(later.tool_call_id) or {}, ensure_ascii=False, sort_keys=True)
                said = " ".join(m.content for m in ordered if failed.seq < m.seq < later.seq
                                and m.role == "assistant" and m.content.strip())
                fix = clip(f"{said} → {failed.tool_name}({args})" if said else f"{failed.tool_name}({args})", 600)
                error = clip(failed.content, 600)
                digest = hashlib.sha256(" ".join(error.casefold().split()).encode()).hexdigest()
                found.append(ErrorFix(failed.tool_name or "tool", error, fix, digest, failed.seq, later.seq, later.ts))
                break
    return found


@dataclass(frozen=True)
class Triple:
    """One entity-graph statement; `closed_by_object` is the newer object that closed it."""
    user_id: str
    subject: str
    relation: str
    object: str
    valid_from: datetime
    valid_until: datetime | None = None
    closed_by_object: str | None = None

    @property
    def topic(self) -> tuple[str, str, str]:
        """What the statement is about: its user, subject and relation."""
        return self.user_id, self.subject.casefold(), self.relation


def _mentions(text: str, phrase: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(phrase.casefold())}(?!\w)", text) is not None


def states(text: str, user_id: str | None, triple: Triple) -> bool:
    """Whether a memory's text states this triple: it names the object, and the subject
    unless the subject is the user themself (whom entries rarely name)."""
    if user_id != triple.user_id:
        return False
    folded = text.casefold()
    return _mentions(folded, triple.object) and (triple.subject == user_id or _mentions(folded, triple.subject))


def overriding(text: str, user_id: str | None, seen_at: datetime, triples: Iterable[Triple]) -> Triple | None:
    """The newest closed triple this memory states, if a later triple with another object
    closed it after the memory was last seen, and the memory does not also state the new
    object (a memory that names the change itself is current)."""
    folded = text.casefold()
    newest = None
    for t in triples:
        if (t.valid_until is not None and t.closed_by_object is not None and seen_at < t.valid_until
                and states(text, user_id, t) and not _mentions(folded, t.closed_by_object)
                and (newest is None or t.valid_until > newest.valid_until)):
            newest = t
    return newest


def superseded_by(text: str, user_id: str | None, seen_at: datetime, triples: Iterable[Triple]) -> str | None:
    """The newer statement that overrides this memory (`overriding`), in words."""
    old = overriding(text, user_id, seen_at, triples)
    return f"{old.subject} {old.relation} {old.closed_by_object}" if old else None


DECAY_FORMULA = ("score = importance * exp(-rate * age_hours) + min(0.3, 0.1 * ln(1 + access_count)),"
                 " rate = base_rate / (1 + importance)")


@dataclass(frozen=True)
class DecayTerms:
    """The parts of navra's FadeMem score (`DECAY_FORMULA`)."""
    rate: float  # per hour: base_rate / (1 + importance), so important memory fades slower
    faded: float  # importance · e^(−rate·age)
    boost: float  # grows with accesses, capped at 0.3

    @property
    def score(self) -> float:
        return self.faded + self.boost


def decay_terms(importance: float, age_hours: float, access_count: int, base_rate: float) -> DecayTerms:
    rate = base_rate / (1 + importance)
    return DecayTerms(rate, importance * math.exp(-rate * max(0.0, age_hours)),
                      min(0.3, 0.1 * math.log1p(max(0, access_count))))


def decay_score(importance: float, age_hours: float, access_count: int, base_rate: float) -> float:
    """navra's FadeMem score (`DECAY_FORMULA`)."""
    return decay_terms(importance, age_hours, access_count, base_rate).score


@dataclass(frozen=True)
class DecayCandidate:
    """A served memory decay may archive: a knowledge entry or a fact."""
    source_table: str
    id: int
    key: str
    user_id: str | None
    text: str
    importance: float
    seen_at: datetime  # conversation time it was last observed
    access_count: int
    last_accessed_at: datetime | None
    valid_until: datetime | None
    has_pii: bool
    run_id: str = ""  # the run that stored it last


@dataclass(frozen=True)
class DecayVerdict:
    candidate: DecayCandidate
    score: float
    # archived: expired, pii_retention or decayed; kept: stored_this_run, too_young,
    # recently_accessed, above_threshold, facts_not_decayed, older_statement_kept
    reason: str
    archived: bool
    as_of: datetime  # the moment it was judged from: its user's newest message


def plan_decay(candidates: Sequence[DecayCandidate], triples: Sequence[Triple], as_of: datetime, *,
               min_age: timedelta, threshold: float, base_rate: float, decay_facts: bool,
               pii_retention: timedelta, clocks: Mapping[str, datetime] | None = None,
               run_id: str | None = None) -> list[DecayVerdict]:
    """What decay does to each candidate as of its user's own clock (`clocks`: each user's
    newest message; `as_of` for a row of no user or a user not in it), in conversation time:
    memory ages by its owner's activity, never by another user's or the wall clock's.

    A row stored by run `run_id` (the run deciding) stays. Expired rows and PII past its
    retention go (explicit limits). Otherwise a row decays only when it is at least
    `min_age` old and unaccessed that long and navra's score has fallen below `threshold`;
    facts only when `decay_facts`. And never a newer statement while an older one about the
    same subject stays: entries stating triples of one (user, subject, relation) are
    archived oldest first, so a kept entry keeps every newer one."""
    clocks = clocks or {}
    verdicts: dict[int, DecayVerdict] = {}
    for c in candidates:
        now = clocks.get(c.user_id, as_of) if c.user_id is not None else as_of
        score = decay_score(c.importance, max(0.0, (now - c.seen_at).total_seconds() / 3600), c.access_count,
                            base_rate)
        if run_id is not None and c.run_id == run_id:
            reason = "stored_this_run"
        elif c.valid_until is not None and c.valid_until <= now:
            reason = "expired"
        elif c.has_pii and c.seen_at < now - pii_retention:
            reason = "pii_retention"
        elif c.source_table == "memory_facts" and not decay_facts:
            reason = "facts_not_decayed"
        elif now - c.seen_at < min_age:
            reason = "too_young"
        elif c.last_accessed_at is not None and now - c.last_accessed_at < min_age:
            reason = "recently_accessed"
        elif score >= threshold:
            reason = "above_threshold"
        else:
            reason = "decayed"
        verdicts[id(c)] = DecayVerdict(c, score, reason, reason in ("expired", "pii_retention", "decayed"), now)
    by_user: dict[str, list[Triple]] = {}  # a memory states only its own user's triples
    for t in triples:
        by_user.setdefault(t.user_id, []).append(t)
    topics: dict[tuple, list[DecayCandidate]] = {}
    for c in candidates:
        if c.source_table == "knowledge_entries":
            for topic in {t.topic for t in by_user.get(c.user_id, ()) if states(c.text, c.user_id, t)}:
                topics.setdefault(topic, []).append(c)
    changed = True
    while changed:  # a row kept in one topic may keep newer rows of its other topics
        changed = False
        for members in topics.values():
            kept_before = False
            for c in sorted(members, key=lambda m: (m.seen_at, m.id)):
                verdict = verdicts[id(c)]
                if kept_before and verdict.reason == "decayed":
                    verdicts[id(c)] = DecayVerdict(c, verdict.score, "older_statement_kept", False, verdict.as_of)
                    changed = True
                kept_before = kept_before or not verdicts[id(c)].archived
    return [verdicts[id(c)] for c in candidates]

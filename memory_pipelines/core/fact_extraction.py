"""Extracted facts: validate what a distillation call returned for a chunk, and turn it into
fact candidates with confidence, lineage and event time."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory_pipelines.digests import json_digest
from memory_pipelines.json_schemas import JsonSchema, describe
from memory_pipelines.llm.prompts import FACT_ITEM_SCHEMA
from memory_pipelines.llm.prompts import FACT_SOURCES as SOURCES
from memory_pipelines.records import Message

CONFIDENCE = {"tool_call": 95, "auto_discovery": 95, "user_explicit": 90}
DEFAULT_CONFIDENCE = 70

_VALIDATOR = JsonSchema(FACT_ITEM_SCHEMA)
_NON_WORD = re.compile(r"[^\w]+", re.UNICODE)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# Spellings of one key: "preferred_language", "language", "my-language", "favoriteLanguage".
_KEY_PREFIXES = ("preferred_", "favorite_", "favourite_", "my_", "default_", "primary_", "current_", "main_",
                 "user_", "usual_")
_KEY_SUFFIXES = ("_preference", "_choice", "_used")
_DISTINCT_KEYS = {"preferred_name", "display_name", "user_name"}  # not spellings of "name"


def normalize_key(key: str) -> str:
    """snake_case, lower case, words only: `Preferred-Language` → `preferred_language`."""
    key = key.strip()
    if key[:1].islower():  # favoriteLanguage → favorite_language; PostgreSQL stays one word
        key = _CAMEL.sub("_", key)
    return _NON_WORD.sub("_", key).strip("_").lower()


def canonical_key(key: str) -> str:
    """The spelling-insensitive form of a key: rows that share it are one fact."""
    key = normalize_key(key)
    if key in _DISTINCT_KEYS:
        return key
    changed = True
    while changed:
        changed = False
        for prefix in _KEY_PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key, changed = key[len(prefix):], True
        for suffix in _KEY_SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix):
                key, changed = key[: -len(suffix)], True
    return key


@dataclass(frozen=True)
class FactCandidate:
    category: str
    key: str
    canonical_key: str
    value: str
    source: str
    confidence: int
    source_context: str | None
    last_verified_at: datetime
    seq_start: int
    seq_end: int
    expires_at: datetime | None = None  # a time limit (facts saved through the API may set one)


@dataclass(frozen=True)
class Rejection:
    item: Any
    reason: str


def validate_items(items: Any, messages: Sequence[Message]) -> tuple[list[FactCandidate], list[Rejection]]:
    """Every item checked against the schema; an invalid one is dropped with its reason.
    `messages` are those the call read (a chunk's): an item's time and span are its
    message's when it names one (`seq`), else all of theirs up to the last. An item citing a
    turn the person did not write as theirs is rejected (`not_the_persons`)."""
    if not isinstance(items, list):
        return [], [Rejection(items, "the answer is not a list of facts")]
    by_seq = {m.seq: m for m in messages}
    first, last = min(by_seq), max(by_seq)
    accepted: list[FactCandidate] = []
    rejected: list[Rejection] = []
    for item in items:
        errors = sorted(_VALIDATOR.errors(item), key=lambda e: list(e.path))
        if errors:
            error = errors[0]
            where = ".".join(str(p) for p in error.path) or "item"
            rejected.append(Rejection(item, f"{where}: {describe(error)}"[:300]))
            continue
        value = str(item["value"]).strip()
        key = normalize_key(item["key"])
        category = normalize_key(item["category"])
        seq = item.get("seq")
        if not value or not key or not category:
            rejected.append(Rejection(item, "empty category, key or value"))
            continue
        if seq is not None and seq not in by_seq:
            rejected.append(Rejection(item, f"seq {seq} is not a message the call read"))
            continue
        source = item.get("source") or "conversation"
        if seq is not None and not_the_persons(by_seq[seq], source):
            rejected.append(Rejection(item, f"seq {seq} is a user turn the person did not write "
                                            f"(speaker {by_seq[seq].speaker}): it states nothing about the user"))
            continue
        anchor = by_seq[seq] if seq is not None else by_seq[last]
        accepted.append(FactCandidate(
            category=category, key=key, canonical_key=canonical_key(key), value=value, source=source,
            confidence=CONFIDENCE.get(source, DEFAULT_CONFIDENCE), source_context=item.get("source_context"),
            last_verified_at=anchor.ts, seq_start=seq if seq is not None else first, seq_end=seq if seq is not None else last,
        ))
    return accepted, rejected


def not_the_persons(message: Message, source: str) -> bool:
    """Whether a fact citing `message` would put words in the user's mouth: a user turn an
    agent or the harness wrote (a subagent's brief, an interruption notice), or any turn
    not the person's for a fact the user is said to have stated (`user_explicit`)."""
    if source == "user_explicit":
        return message.speaker != "human"
    return message.role == "user" and message.speaker != "human"


def facts_fingerprint(facts: Sequence[tuple[str, str, str]]) -> str:
    """What a user's memory_summary was written from: (category, key, value) of every current
    fact, in any order. The same fingerprint again needs no new summary."""
    return json_digest(sorted(facts), ensure_ascii=False)


def render_fact(category: str, key: str, value: str, confidence: int, updated: datetime, now: datetime) -> str:
    """One fact as a prompt line: `• [preferences] editor → neovim (confidence: 90%, updated 34d ago)`."""
    return f"• [{category}] {key} → {value} (confidence: {confidence}%, updated {_age(updated, now)})"


def _age(then: datetime, now: datetime) -> str:
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return "just now"

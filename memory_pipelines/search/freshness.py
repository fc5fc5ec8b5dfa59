"""Whether a raw excerpt is outdated: the newer statement that replaced one it made."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memory_pipelines.core.fact_extraction import canonical_key
from memory_pipelines.core.knowledge_entries import Triple, overriding
from memory_pipelines.search.hits import MemoryHit


def outdated_by(hit: MemoryHit, items: Sequence[dict], closed: Sequence[dict], current: dict[tuple, dict],
                triples: Sequence[Triple] = ()) -> str | None:
    """The newest statement that replaced one the excerpt made about the same subject: a
    fact item of a turn it holds whose fact (the same key) now holds another value, seen
    after the excerpt; a graph statement of its turns another closed (the same subject and
    relation); or a closed graph statement its text states (subject and old object, as a
    knowledge entry is judged: `core.knowledge_entries.superseded_by`). An excerpt that
    names the newer value itself states the change: current. None when nothing it said was replaced
    (sharing words with a newer fact is not enough: a fact of another subject from the same
    session does not date it)."""
    if hit.timestamp is None:
        return None
    folded = hit.text.casefold()
    newer: list[tuple[datetime, str]] = []
    if old := overriding(hit.text, hit.user_id, hit.timestamp, triples):
        newer.append((old.valid_until, f"{old.subject} {old.relation} {old.closed_by_object}"))
    for item in items:
        if item["session_id"] != hit.session_id or not hit.start_seq <= item["seq"] <= hit.end_seq:
            continue
        fact = current.get((hit.user_id, canonical_key(item["key"])))
        if (fact is not None and fact["last_verified_at"] > hit.timestamp
                and fact["value"].strip().casefold() != str(item["value"]).strip().casefold()
                and fact["value"].strip().casefold() not in folded):
            newer.append((fact["last_verified_at"], f"{fact['key']}: {fact['value']}"))
    for statement in closed:
        if (statement["session_id"] == hit.session_id and statement["seq_start"] <= hit.end_seq
                and statement["seq_end"] >= hit.start_seq and statement["valid_until"] > hit.timestamp
                and statement["newer_object"].casefold() not in folded):
            newer.append((statement["valid_until"],
                          f"{statement['subject']} {statement['relation']} {statement['newer_object']}"))
    return max(newer)[1] if newer else None

"""Deterministic knowledge synthesis (the `rules` back end): typed entries and entity
relations from explicit statements.

- instruction: the session summary's key_decisions (Do:/Don't:), confidence 0.9;
- user / project / fact: the explicit-statement facts (identity, preferences, work →
  user; decisions → project; tools, environment → fact), titled by what they are about, so
  a changed value is a new version of the same entry;
- event: incidents, outages and pages reported by the user, confidence 0.8;
- insight: an assistant's root-cause or "the fix was" explanation, confidence 0.7;
- user, tagged `self` and a topic: each clause the person said about themselves (likes,
  plans, relations, work, places, health, habits, other; `rules.self_statements`) that no
  fact above already holds, confidence 0.8.
Relations: works_at, reports_to, uses, depends_on, listens_on, deployed_on, uses_database.
What is the user's comes only from turns the person wrote (`Message.speaker` human): a
subagent's brief or harness text stored as a user turn is context, never an instruction,
a fact about the user, an event they reported or a relation they stated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memory_pipelines.records import Message, Summary
from memory_pipelines.rules.extraction import extract_facts
from memory_pipelines.rules.self_statements import find_self_statements
from memory_pipelines.rules.text import clip, sentences

KIND_BY_CATEGORY = {"identity": "user", "preferences": "user", "work": "user", "decisions": "project",
                    "tools": "fact", "environment": "fact"}
_EVENT = re.compile(r"^\s*(?:incident|outage|postmortem)\b|went down|\bpaged\b|\boutage\b|\bDiskPressure\b",
                    re.IGNORECASE)
_INSIGHT = re.compile(r"\b(root cause|the (?:problem|issue|fix) (?:was|is)|this happened because|caused by)\b",
                      re.IGNORECASE)
_USES = re.compile(r"\b(?:project )?([A-Z][\w-]+) uses ([A-Z][\w.+-]*(?:\s*(?:,|and)\s*[A-Z][\w.+-]*)*)")
_DEPENDS = re.compile(r"\b([a-z][\w-]+) depends on (?:the )?([a-z][\w-]+)", re.IGNORECASE)
_ONLY_WORDS = re.compile(r"[^\w\s'’.-]")


def _title(text: str) -> str:
    return clip(" ".join(_ONLY_WORDS.sub(" ", text).split()), 80)


def synthesize(messages: Sequence[Message], summary: Summary | None, facts: list[dict] | None = None) -> dict:
    """Entries and relations of `messages`; `facts`: `extract_facts(messages)` when the caller
    has them already (a distillation returns them too)."""
    entries: list[dict] = []
    relations: list[dict] = []
    by_seq = {m.seq: m for m in messages}
    for decision in (summary.key_decisions if summary else ()):
        said = decision.split(": ", 1)[-1]
        # the person's turn of this chunk that said it (a decision of an earlier chunk cites none)
        source = next((m.seq for m in reversed(messages) if m.speaker == "human" and said in m.content), None)
        if source is None and any(said in m.content for m in messages if m.role == "user"):
            continue  # only a user turn the person did not write says it (a summary model took it up)
        entries.append({"kind": "instruction", "title": _title(said), "content": decision,
                        "tags": ["decision"], "confidence": 0.9, "seq": source})
    facts = extract_facts(messages) if facts is None else facts
    for item in facts:
        kind = KIND_BY_CATEGORY.get(item["category"], "fact")
        subject = item["key"].replace("_", " ")
        entries.append({"kind": kind, "title": _title(subject), "content": f"{subject}: {item['value']}",
                        "tags": [item["category"]], "confidence": 0.9 if item["source"] == "user_explicit" else 0.8,
                        "seq": item["seq"]})
        relation = _relation(item)
        if relation:
            relations.append({**relation, "confidence": 0.9, "seq": item["seq"]})
    for said in find_self_statements(messages):
        if any(f["seq"] == said.seq and f["value"].casefold() in said.sentence.casefold() for f in facts):
            continue  # the sentence's fact is an entry already ("I prefer vim as my editor": editor: vim)
        entries.append({"kind": "user", "title": clip(said.sentence, 200), "content": said.sentence,
                        "tags": ["self", said.topic], "confidence": 0.8, "seq": said.seq})
    for m in messages:
        if m.speaker == "human" and _EVENT.search(m.content):
            first = sentences(m.content)[0] if sentences(m.content) else m.content
            entries.append({"kind": "event", "title": _title(first), "content": clip(m.content, 600),
                            "tags": ["incident"], "confidence": 0.8, "seq": m.seq})
        if m.role == "assistant":
            for sentence in sentences(m.content):
                if _INSIGHT.search(sentence) and 20 <= len(sentence) <= 400:
                    entries.append({"kind": "insight", "title": _title(sentence), "content": sentence,
                                    "tags": ["lesson"], "confidence": 0.7, "seq": m.seq})
        if m.speaker == "human":
            for subject, objects in _USES.findall(m.content):
                for obj in (o.strip(".,;:") for o in re.split(r"\s*(?:,|and)\s*", objects)):
                    if obj:
                        relations.append({"subject": subject, "relation": "uses", "object": obj,
                                          "confidence": 0.8, "seq": m.seq})
            for subject, obj in _DEPENDS.findall(m.content):
                relations.append({"subject": subject, "relation": "depends_on", "object": obj,
                                  "confidence": 0.8, "seq": m.seq})
    return {"entries": [e for e in entries if e["seq"] is None or e["seq"] in by_seq], "relations": relations}


def _relation(item: dict) -> dict | None:
    if item["category"] not in ("decisions", "work"):
        return None
    key, value, user = item["key"], item["value"], "user"
    if key == "employer":
        return {"subject": user, "relation": "works_at", "object": value}
    if key == "manager":
        return {"subject": user, "relation": "reports_to", "object": value}
    for suffix, relation in (("_port", "listens_on"), ("_deploy_target", "deployed_on"), ("_database", "uses_database")):
        if key.endswith(suffix) and key != suffix.lstrip("_"):
            return {"subject": key[: -len(suffix)], "relation": relation, "object": value}
    return None

"""Prompt templates. A prompt's version is a hash of its template, recorded with every call
and every row it produced, so a changed prompt is visible in lineage."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Prompt:
    purpose: str
    system: str

    @property
    def version(self) -> str:
        return hashlib.sha256(f"{self.purpose}\n{self.system}".encode()).hexdigest()[:12]


JUDGE_SEGMENTS = Prompt("judge_segments", """\
You filter conversation segments before they are summarized. Below are the segments of
one or more conversations, each conversation under its own "## conversation" heading. A
segment is one user message and the replies after it. Judge each segment: is it noise?
Noise is a greeting, thanks, the user repeating a request made earlier in the same
conversation, or a failed or cancelled turn with no result.
Anything with information, a decision, a question that was answered or a tool result is
not noise. Give your confidence from 0 to 1.
Reply with one JSON object only:
{"segments": [{"id": "<segment id>", "noise": true|false, "reason": "greeting|thanks|repeated_request|cancelled|failed_no_result|null", "confidence": 0.0-1.0}]}""")

FIND_OVERTURNED = Prompt("find_overturned", """\
Below is the previous summary of a conversation, its entries numbered, and new
conversation segments. Which key_decisions and past_discussions entries do the new
segments overturn or supersede (a rule the user changed, a choice replaced by another)?
Reply with one JSON object only: {"overturned": [<entry numbers>]}""")

SUMMARIZE = Prompt("summarize", """\
You keep a rolling summary of a conversation between a user and an assistant. The
previous summary is below; the user message holds the next messages of the conversation.
Return the updated summary: merge the new messages into it, keep what still holds, and
drop what the new messages overturn.
Fields:
- key_decisions: only rules that apply from now on, at most 8. Each starts with the
  English "Do: " (agreed) or "Don't: " (refused), whatever the output language.
- past_discussions: short notes of earlier topics.
- current_discussion: what the conversation is about right now.
- keys: names, identifiers, file paths, numbers and other entities a later question
  would use (at most 40, most important first).
- language: the language the other fields are written in.
Write every field except the Do:/Don't: prefixes in {language}.
Previous summary (JSON):
{previous}
Reply with one JSON object only:
{{"key_decisions": [], "past_discussions": [], "current_discussion": "", "keys": [], "language": ""}}""")

SELECT_RELEVANT = Prompt("select_relevant", """\
Below are the numbered entries of a conversation summary and the user's next request.
Which entries are relevant to the request? General rules about language, format or
workflow always count as relevant.
Reply with one JSON object only: {"relevant": [<entry numbers>]}""")

EXTRACT_FACTS = Prompt("extract_facts", """\
Extract stable facts about the user from the conversation below: who they are, where
they live and work, their preferences, the tools and setups they use, and decisions that
hold from now on (a chosen port, a deploy target). Each line of the conversation starts
with its message number in brackets. Skip small talk and anything temporary.
Reply with one JSON object only: {"facts": [{"category": "identity|preferences|work|tools|environment|decisions|...",
"key": "snake_case_name", "value": "...", "source": "user_explicit|tool_call|auto_discovery|conversation",
"source_context": "a short quote it came from", "seq": <message number>}]}
The facts are about the user this conversation belongs to, whatever the conversation says.""")

SUMMARIZE_FACTS = Prompt("summarize_facts", """\
Write a short narrative (at most 8 sentences) of what is known about the user, from the
facts below, grouped by theme; prefer newer facts. Reply with one JSON object only:
{"summary": "..."}""")

SYNTHESIZE_KNOWLEDGE = Prompt("synthesize_knowledge", """\
Distill durable knowledge from the conversation below (numbered lines) and its summary.
Entry kinds: fact, event, instruction (a rule to follow from now on), insight (a lesson,
a root cause), user (about the person), project (about their work). Give each a short
stable title (the same thing gets the same title next time), the content, tags and your
confidence from 0 to 1; scope is "entity" (about this user, the default), "session",
"process" (with scope_id naming the workflow) or "global" (true for everyone, no personal
data). Also list relations between entities as (subject, relation, object), "user" being
the person. Reply with one JSON object only:
{"entries": [{"kind": "...", "title": "...", "content": "...", "tags": [], "confidence": 0.0, "scope": "entity", "seq": <line number>}],
 "relations": [{"subject": "...", "relation": "snake_case", "object": "...", "confidence": 0.0, "seq": <line number>}]}""")

SUMMARIZE_NODE = Prompt("summarize_node", """\
Condense the summaries below, of consecutive parts of one user's conversation history (one
per line, oldest first), into one summary of at most three sentences that keeps the names,
numbers and decisions they hold. Reply with one JSON object only: {"summary": "..."}""")

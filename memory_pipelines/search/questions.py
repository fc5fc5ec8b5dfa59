"""What a question asks, read offline: its parts ("what do my pottery class and my running club
have in common" asks about two things, each of which needs its own evidence) and whether it
asks about the person ("would I enjoy a silent retreat?"), whom their own statements answer."""

from __future__ import annotations

import re

from memory_pipelines.rules.text import content_words

# where a question joins its parts: conjunctions, lists and comparisons
_JOINS = re.compile(r"\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|versus|vs\.?|as well as|compared (?:to|with)|"
                    r"(?:(?:more|less|better|worse|rather)\s+)?than|while|whereas|but)\s+", re.IGNORECASE)
_FRAME = re.compile(r"\b(?:have in common|in common|both|between|differ(?:ence|ent)?)\b", re.IGNORECASE)
MIN_PART_WORDS = 2  # content words a part needs to be searched on its own
MAX_PARTS = 4

_ME = re.compile(r"\b(?:I|me|my|myself|I'm|I’m|I'd|I’d)\b")
# what a question about the person asks: a guess from what they said of themselves, their
# tastes, character or likely choices
_ABOUT_PERSON = re.compile(
    r"\b(?:would|might|could|likely|probably|enjoy|appreciate|suit|interested|personality|character|kind of person|"
    r"sort of person|type of person|what kind|what sort|what type|hobbies|values|care about|good fit|"
    r"gift|present|prefer|like|likes|love|into|fan|should (?:I|we|someone|somebody)|good idea|fit|am I|"
    r"more likely)\b", re.IGNORECASE)


def question_parts(question: str) -> list[str]:
    """The parts a question joins, each with enough words to be searched on its own (at most
    `MAX_PARTS`); [] when it asks one thing. A framing word ("in common", "between") is left
    out of the parts: it names the relation, not what to find."""
    text = _FRAME.sub(" ", question.strip().rstrip("?!. "))
    parts = [p.strip() for p in _JOINS.split(text) if p and p.strip()]
    parts = [p for p in parts if len(content_words(p)) >= MIN_PART_WORDS]
    return parts[:MAX_PARTS] if len(parts) > 1 else []


def in_first_person(question: str) -> bool:
    """Whether the question speaks of the asker ("how did my knee recover?")."""
    return bool(_ME.search(question))


def asks_about_person(question: str) -> bool:
    """A question in the first person about tastes, character or likely choices ("would I
    enjoy …", "what might I study", "what kind of gift suits me"): the person's own
    statements answer it before any one conversation does."""
    return bool(_ME.search(question) and _ABOUT_PERSON.search(question))

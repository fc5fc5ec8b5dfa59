"""Extractive rolling summaries, overturned entries and relevance (the `rules` back end).

- key_decisions: sentences of the user's that state a rule from now on ("from now on",
  "always", "never", "let's ...", "we agreed ...", and their German, Spanish, Japanese and
  Chinese counterparts), prefixed `Do: ` or `Don't: ` (negated ones); at most 8, newest kept.
- past_discussions: the opening request of each earlier kept segment, newest kept.
- current_discussion: the last request and the first sentence of the answer to it.
- keys: breadcrumbs of the new messages, then the previous keys.
- An entry is overturned when a new user message marks a change ("switch", "instead",
  "no longer", "from now on", ...) and shares at least two content words with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memory_pipelines.breadcrumbs import extract_breadcrumbs, merge_breadcrumbs
from memory_pipelines.records import Message, Summary
from memory_pipelines.rules.text import clip, content_words, detect_language, sentences

_DECISION = re.compile(
    r"\b(from now on|going forward|always|never|let'?s|we agreed|agreed|we decided|decided to|"
    r"please (always|never|use|answer|keep|write|reply)|stick (with|to)|switch (to|\w+ to)|"
    r"don'?t|do not|stop using|must|ab jetzt|ab sofort|immer|niemals|nie |wir nehmen|"
    r"a partir de ahora|siempre|nunca|usemos|vamos a|lass uns|nehmen wir)\b|"
    r"これから|今後|常に|必ず|しないで|ましょう|にします|從現在起|以後|一律|不要|請用|就用|決定",
    re.IGNORECASE,
)
_NEGATIVE = re.compile(
    r"\b(never|don'?t|do not|stop using|no longer|not use|niemals|nie |nicht|nunca|no uses|no usar)\b|しないで|不要|別用",
    re.IGNORECASE,
)
_CHANGE = re.compile(
    r"\b(switch|switched|change|changed|instead|no longer|not anymore|any ?more|from now on|replace|"
    r"move to|moved to|stop using|actually|clash|clashes|stattdessen|ab jetzt|wechsel|ändere|"
    r"en lugar de|en vez de|cambia|cambiamos|a partir de ahora)\b|代わりに|変更|改成|改為|換成|改用",
    re.IGNORECASE,
)
_GENERAL_RULE = re.compile(
    r"\b(language|answer in|reply in|respond in|german|english|spanish|japanese|chinese|deutsch|español|"
    r"format|markdown|concise|short|bullet|tone|workflow|always|never|commit|review|test first)\b|"
    r"語|語言|形式",
    re.IGNORECASE,
)

MAX_ENTRY_CHARS = 240


def _decision_entries(messages: Sequence[Message]) -> list[str]:
    entries = []
    for m in messages:
        if m.role != "user":
            continue
        for sentence in sentences(m.content):
            if len(sentence) > 400 or not _DECISION.search(sentence):
                continue
            prefix = "Don't: " if _NEGATIVE.search(sentence) else "Do: "
            entries.append(prefix + clip(sentence, MAX_ENTRY_CHARS))
    return entries


def _requests(messages: Sequence[Message]) -> list[str]:
    return [clip(m.content, 200) for m in messages if m.role == "user" and m.content.strip()]


def _first_answer_sentence(messages: Sequence[Message]) -> str:
    for m in reversed(messages):
        if m.role == "assistant" and m.content.strip():
            first = sentences(m.content)
            return clip(first[0] if first else m.content, 200)
    return ""


def summarize(previous: Summary, messages: Sequence[Message], language: str) -> Summary:
    """Fold `messages` (kept, in order) into `previous`."""
    requests = _requests(messages)
    if language == "auto":
        # the conversation's language: what both sides write (tool output does not count)
        texts = [m.content for m in messages if m.role in ("user", "assistant") and m.content.strip()]
        language = detect_language(texts) if texts else (previous.language or "auto")
    past = list(previous.past_discussions)
    if previous.current_discussion:
        past.append(previous.current_discussion)
    past.extend(requests[:-1])
    current = previous.current_discussion
    if requests:
        answer = _first_answer_sentence(messages)
        current = requests[-1] + (f" → {answer}" if answer else "")
    keys = merge_breadcrumbs(extract_breadcrumbs(m.content for m in messages), previous.keys)
    return Summary.from_json({
        "key_decisions": [*previous.key_decisions, *_decision_entries(messages)],
        "past_discussions": past,
        "current_discussion": current,
        "keys": keys,
        "language": language,
    })


def overturned_entries(previous: Summary, messages: Sequence[Message]) -> set[str]:
    """Entries of key_decisions and past_discussions that the new user messages overturn."""
    changes = [
        content_words(s) for m in messages if m.role == "user"
        for s in sentences(m.content) if _CHANGE.search(s)
    ]
    gone = set()
    for entry in (*previous.key_decisions, *previous.past_discussions):
        body = content_words(entry.split(": ", 1)[1] if entry.startswith(("Do: ", "Don't: ")) else entry)
        if any(len(body & change) >= 2 for change in changes):
            gone.add(entry)
    return gone


def relevant_entries(summary: Summary, request: str) -> Summary | None:
    """The entries relevant to `request` (general rules always count); None when none are."""
    wanted = content_words(request)

    def keep(entry: str) -> bool:
        return bool(_GENERAL_RULE.search(entry)) or len(content_words(entry) & wanted) >= 1

    decisions = tuple(e for e in summary.key_decisions if keep(e))
    past = tuple(e for e in summary.past_discussions if keep(e))
    current = summary.current_discussion if summary.current_discussion and keep(summary.current_discussion) else ""
    if not (decisions or past or current):
        return None
    return Summary(decisions, past, current, summary.keys, summary.language)

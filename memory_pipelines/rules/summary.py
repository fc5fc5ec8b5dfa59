"""Extractive rolling summaries, overturned entries and relevance (the `rules` back end).

- key_decisions: sentences the person wrote (`Message.speaker` human: not an agent's brief
  nor harness text stored as a user turn) that state a rule from now on ("from now on",
  "always", "never", "let's ...", "we agreed ...", and their German, Spanish, Japanese and
  Chinese counterparts), prefixed `Do: ` or `Don't: ` by the rule's polarity
  (`decision_prefix`); at most 8, newest kept.
- past_discussions: the opening request of each earlier kept segment, newest kept (an
  agent's brief as `Agent's brief: ...`; harness text is no request).
- current_discussion: the last request and the first sentence of the answer to it.
- keys: breadcrumbs of the new messages, then the previous keys.
- An entry is overturned when a new message of the person's marks a change ("switch", "instead",
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
# A rule's polarity is its directive clause's, read from the clause's head: "never push",
# "we should not push", "let's not", "avoid", "stop using" are `Don't:`; a negation later in
# the clause or in another ("always run the linter so the build doesn't break", "use port
# 5000, not 8080", "the old one no longer works") is not the rule's.
_CLAUSE_BREAK = re.compile(
    r"\s*[,;:()]\s*|\s+[—–-]{1,2}\s+|\s*[—–]\s*|\s*[，、；：（）]\s*|\s+(?:and|but|or|und|aber|oder|sondern|y|pero|sino)\s+",
    re.IGNORECASE,
)
_LEAD_IN = re.compile(
    r"^(?:(?:please|kindly|so(?!\s+that)|then|therefore|also|and|but|ok(?:ay)?|alright|again|now|just|"
    r"from now on|going forward|from here on(?: out)?|in (?:the )?future|for now|by default|as a rule|in general|"
    r"generally|remember(?: to)?|make sure(?: that)?|be sure(?: to)?|ensure(?: that)?|i want you to|"
    r"i'?d like you to|(?:we )?(?:agreed|decided)(?: on| that| to)?|let'?s|let us|"
    r"(?:don'?t|do not|never) (?:forget|hesitate)(?: to)?|ab jetzt|ab sofort|bitte|a partir de ahora|"
    r"por favor)\b[\s,!.]*)+",
    re.IGNORECASE,
)
_SUBORDINATE = re.compile(
    r"^(?:if|when|whenever|unless|because|since|as|so that|even|although|though|while|whereas|which|who|"
    r"until|before|after|once|in case|otherwise|or else|wenn|falls|weil|da|damit|obwohl|si|cuando|porque|"
    r"aunque|para que)\b",
    re.IGNORECASE,
)
_NEGATIVE_HEAD = re.compile(
    r"^(?:(?:you|we|i|they|everyone|everybody|the team)(?:'ll|'d)?\s+)?"
    r"(?:(?:should|must|will|shall|need to|have to|are to|would|can|may)\s+)?(?:always\s+|ever\s+)?"
    r"(?:never|not|no longer|no more|no|nobody|no one|don'?t|dont|do not|does not|doesn'?t|mustn'?t|must not|"
    r"shouldn'?t|should not|won'?t|will not|can'?t|cannot|may not|avoid|stop|quit|refrain|"
    r"niemals|nie|nicht|kein|keine|nunca|jamás)\b",
    re.IGNORECASE,
)
# negations that may stand after the verb (German) or anywhere (Japanese, Chinese), and
# prohibitions said of the thing ("force pushes are not allowed")
_NEGATIVE_IN_CLAUSE = re.compile(
    r"\b(?:niemals|nie|nicht|nunca)\b|\b(?:is|are)\s+(?:not allowed|not permitted|forbidden|prohibited|banned|"
    r"off[- ]limits)\b|しないで|やめて|不要|別用|不准|禁止",
    re.IGNORECASE,
)


def _clauses(sentence: str) -> list[tuple[int, str]]:
    """(end offset, text) of each clause of `sentence`, in order."""
    spans, start = [], 0
    for cut in (*_CLAUSE_BREAK.finditer(sentence), None):
        end = cut.start() if cut else len(sentence)
        if sentence[start:end].strip():
            spans.append((end, sentence[start:end].strip()))
        start = cut.end() if cut else start
    return spans


def _head(clause: str) -> str:
    """A clause without its lead-in ("from now on", "please", "let's", "make sure that")."""
    return _LEAD_IN.sub("", clause).strip()


def decision_prefix(sentence: str) -> str:
    """`Don't: ` when the rule `sentence` states forbids (its directive clause opens with a
    negation), else `Do: `. The directive clause is the one a rule word falls in; a clause of
    only a lead-in ("From now on, ...") hands over to the next, a subordinate one ("...,
    because we never ...") to the clause it qualifies."""
    text = sentence.replace("’", "'")
    spans = _clauses(text) or [(len(text), text)]
    heads = [_head(clause) for _, clause in spans]
    match = _DECISION.search(text)
    at = next((i for i, (end, _) in enumerate(spans) if match and match.start() < end), 0)
    while at + 1 < len(spans) and not heads[at]:
        at += 1
    if _SUBORDINATE.match(heads[at]):
        main = [i for i in (*range(at - 1, -1, -1), *range(at + 1, len(spans)))
                if heads[i] and not _SUBORDINATE.match(heads[i])]
        at = main[0] if main else at
    negative = _NEGATIVE_HEAD.match(heads[at]) or _NEGATIVE_IN_CLAUSE.search(spans[at][1])
    return "Don't: " if negative else "Do: "


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
AGENT_BRIEF = "Agent's brief: "  # a request an agent wrote as a user turn (a subagent's task)


def _decision_entries(messages: Sequence[Message]) -> list[str]:
    """The rules stated in turns the person wrote (an agent's brief binds no user)."""
    entries = []
    for m in messages:
        if m.speaker != "human":
            continue
        for sentence in sentences(m.content):
            if len(sentence) > 400 or not _DECISION.search(sentence):
                continue
            entries.append(decision_prefix(sentence) + clip(sentence, MAX_ENTRY_CHARS))
    return entries


def _requests(messages: Sequence[Message]) -> list[str]:
    """The requests of user turns: the person's as they are, an agent's brief (a subagent's
    task) as the agent's work; harness text and tool output stored as user turns are none."""
    return [clip(m.content, 200) if m.speaker == "human" else AGENT_BRIEF + clip(m.content, 200 - len(AGENT_BRIEF))
            for m in messages if m.role == "user" and m.speaker in ("human", "agent") and m.content.strip()]


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
    """Entries of key_decisions and past_discussions that the person's new messages overturn."""
    changes = [
        content_words(s) for m in messages if m.speaker == "human"
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

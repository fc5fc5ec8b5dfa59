"""Noise judgement over conversation segments: greetings, thanks, repeated requests,
cancelled or failed turns with no result. Multilingual word lists, exact rules."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from memory_pipelines.records import NoiseVerdict, Segment
from memory_pipelines.rules.text import STOPWORDS, normalize, words

GREETINGS = {
    "hi", "hello", "hey", "hiya", "yo", "good morning", "good afternoon", "good evening", "morning",
    "hello there", "hi there", "hey there", "hallo", "guten morgen", "guten tag", "servus", "moin",
    "hola", "buenos días", "buenos dias", "buenas tardes", "buenas", "bonjour", "salut",
    "こんにちは", "おはよう", "おはようございます", "こんばんは", "你好", "您好", "嗨", "哈囉", "早安",
}
THANKS = {
    "thanks", "thank you", "thx", "ty", "thanks a lot", "thank you very much", "many thanks", "cheers",
    "great thanks", "perfect thanks", "awesome thanks", "thanks that's all", "thank you that's all",
    "danke", "danke schön", "danke dir", "vielen dank", "gracias", "muchas gracias", "merci",
    "ありがとう", "ありがとうございます", "謝謝", "多謝", "感謝", "谢谢",
}
_CANCEL = re.compile(
    r"\b(never ?mind|cancel (that|it|this)|forget (it|that|about it)|scratch that|stop that|"
    r"vergiss es|egal|abbrechen|olvídalo|olvidalo|déjalo|dejalo|cancela)\b|やめて|キャンセル|取消|算了",
    re.IGNORECASE,
)
_CANCELLED_MARK = re.compile(r"\[(cancelled|canceled|aborted)( by user)?\]", re.IGNORECASE)
_FILLER = {"ok", "okay", "great", "perfect", "awesome", "nice", "cool", "so", "that's", "all", "very",
           "much", "again", "everyone", "team", "bot", "navi", "just", "wanted", "to", "say", "and", "for",
           "your", "help", "the", "oh", "well", "alright", "bye", "see", "you"}

DROP_THRESHOLD = 0.7
MAX_FILLER_WORDS = 6  # beside a greeting or thanks


@dataclass(frozen=True)
class _Phrases:
    all: frozenset[str]
    longest: int  # words in the longest phrase

    @classmethod
    def of(cls, phrases: set[str]) -> _Phrases:
        return cls(frozenset(phrases), max(phrase.count(" ") + 1 for phrase in phrases))


_GREETING_PHRASES, _THANKS_PHRASES = _Phrases.of(GREETINGS), _Phrases.of(THANKS)


def _phrase_match(norm: str, phrases: _Phrases) -> bool:
    """`norm` (normalized text) is a phrase, or holds one with nothing else but filler."""
    if not norm:
        return False
    if norm in phrases.all:
        return True
    # "thanks, that's all for today" / "hi navi!": a known phrase plus filler words only
    tokens = norm.split()
    if len(tokens) > MAX_FILLER_WORDS + phrases.longest:
        return False  # more words than any phrase and its filler: most messages end here
    for i in range(len(tokens)):
        for j in range(i + 1, min(len(tokens), i + phrases.longest) + 1):
            if " ".join(tokens[i:j]) in phrases.all:
                rest = tokens[:i] + tokens[j:]
                if len(rest) <= MAX_FILLER_WORDS and all(t in _FILLER or t in phrases.all for t in rest):
                    return True
    return False


MIN_CONTENT_WORDS = 3  # a turn with fewer words of its own (not stopwords, not filler) is chatter


def is_chatter(text: str) -> bool:
    """A greeting, a thanks or an echo ("haha nice!", "that's great to hear"): a turn that
    carries no evidence of its own. A number keeps a turn (a time, a port, a date)."""
    norm = normalize(text)
    if _phrase_match(norm, _GREETING_PHRASES) or _phrase_match(norm, _THANKS_PHRASES):
        return True
    if any(ch.isdigit() for ch in text):
        return False
    own = [w for w in norm.split() if len(w) > 2 and w not in _FILLER and w not in STOPWORDS["en"]]
    return len(own) < MIN_CONTENT_WORDS


def _user_text(segment: Segment) -> str:
    first = segment.messages[0]
    return first.content if first.role == "user" else ""


def _has_result(segment: Segment) -> bool:
    """An assistant reply with text, or a tool result that did not fail."""
    for m in segment.messages[1:]:
        if m.role == "assistant" and m.content.strip() and not m.metadata.get("finish_reason") == "error":
            if not _CANCELLED_MARK.search(m.content):
                return True
        if m.role == "tool" and not m.metadata.get("is_error"):
            return True
    return False


def judge_segments(segments: Sequence[Segment]) -> list[NoiseVerdict]:
    """One verdict per segment, in order. `segments` are one session's segments in a window."""
    verdicts: list[NoiseVerdict] = []
    previous_request: str | None = None
    previous_answered = False
    for index, segment in enumerate(segments):
        text = _user_text(segment)
        is_last = index == len(segments) - 1
        request = normalize(text)
        if _phrase_match(request, _GREETING_PHRASES) and not any(m.tool_name for m in segment.messages):
            verdict = NoiseVerdict(True, 0.9, "greeting")
        elif _phrase_match(request, _THANKS_PHRASES) and not any(m.tool_name for m in segment.messages):
            verdict = NoiseVerdict(True, 0.9, "thanks")
        elif text and _CANCEL.search(text) and len(words(text)) <= 12:
            verdict = NoiseVerdict(True, 0.85, "cancelled")
        elif any(_CANCELLED_MARK.search(m.content) for m in segment.messages[1:] if m.role == "assistant") \
                and not _has_result(segment):
            verdict = NoiseVerdict(True, 0.85, "cancelled")
        elif request and request == previous_request and previous_answered:
            verdict = NoiseVerdict(True, 0.8, "repeated_request")
        elif text and not is_last and not _has_result(segment):
            # the user moved on without getting anything back
            verdict = NoiseVerdict(True, 0.75, "failed_no_result")
        else:
            verdict = NoiseVerdict(False, 0.9)
        verdicts.append(verdict)
        if text:
            previous_request, previous_answered = request, _has_result(segment)
    return verdicts

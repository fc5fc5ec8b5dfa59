"""Text helpers shared by the heuristics: language, words, sentences."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import lru_cache

_WORD = re.compile(r"[\w][\w'’-]*", re.UNICODE)
_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")

STOPWORDS = {
    "en": {"the", "a", "an", "and", "or", "to", "of", "in", "on", "for", "is", "it", "that", "this", "with",
           "be", "are", "was", "you", "i", "we", "my", "me", "our", "your", "at", "as", "by", "can", "do",
           "please", "from", "so", "if", "not", "but", "what", "how", "now", "all", "just", "should", "will",
           "use", "let's", "lets", "run", "make", "get", "set", "also", "then", "there", "here", "its", "let"},
    "de": {"der", "die", "das", "und", "ist", "nicht", "ich", "du", "wir", "ein", "eine", "zu", "mit", "auf",
           "für", "von", "bitte", "auch", "den", "dem", "es", "sie", "wie", "was", "noch", "mir", "mein"},
    "es": {"el", "la", "los", "las", "y", "es", "que", "de", "en", "un", "una", "por", "para", "con", "no",
           "mi", "me", "lo", "se", "del", "al", "como", "más", "pero", "sí", "tu", "yo"},
    "fr": {"le", "la", "les", "et", "est", "que", "de", "des", "un", "une", "pour", "avec", "pas", "je",
           "vous", "nous", "mon", "ma", "ce", "qui", "dans", "sur"},
}
ALL_STOPWORDS = set().union(*STOPWORDS.values())

# the detected language (detect_language) -> PostgreSQL text search configuration (stemming
# and stop words); anything else is `simple`: words as they are
TEXT_SEARCH_CONFIGS = {"en": "english", "de": "german", "es": "spanish", "fr": "french", "it": "italian",
                       "pt": "portuguese", "nl": "dutch"}


def text_search_config(language: str) -> str:
    return TEXT_SEARCH_CONFIGS.get(language, "simple")


def words(text: str) -> list[str]:
    if text.isascii():  # casefold is lower there and keeps every offset: one call, not one a word
        return _WORD.findall(text.lower())
    return [w.casefold() for w in _WORD.findall(text)]


def content_words(text: str) -> set[str]:
    """Words that carry meaning: no stop words, at least 3 characters or a number, and CJK
    runs split into characters pairs so Chinese and Japanese overlap can be measured."""
    out: set[str] = set()
    for word in words(text):
        if _is_cjk(word):
            out.update(word[i : i + 2] for i in range(max(1, len(word) - 1)))
        elif word not in ALL_STOPWORDS and (len(word) >= 3 or word.isdigit()):
            out.add(word)
    return out


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def normalize(text: str) -> str:
    """Lower-case words only: for comparing requests ("Run the tests!" == "run the tests")."""
    return " ".join(words(text))


def _is_cjk(text: str) -> bool:
    # ASCII has no CJK character: skip the name lookups for nearly every word
    return not text.isascii() and any(unicodedata.name(ch, "").startswith(("CJK", "HIRAGANA", "KATAKANA"))
                                      for ch in text)


@lru_cache(maxsize=1 << 16)
def _script(ch: str) -> str:
    """kana, han or '' (anything else) by the character's Unicode name."""
    name = unicodedata.name(ch, "")
    return "kana" if name.startswith(("HIRAGANA", "KATAKANA")) else "han" if name.startswith("CJK UNIFIED") else ""


def detect_language(texts: list[str]) -> str:
    """ISO 639-1 code of the dominant language of `texts` (en when unsure)."""
    joined = " ".join(texts)
    scripts: Counter[str] = Counter()
    if not joined.isascii():  # each distinct non-ASCII character named once (ASCII has no kana or han)
        for ch, count in Counter(_NON_ASCII.findall(joined)).items():
            scripts[_script(ch)] += count
    kana, han = scripts["kana"], scripts["han"]
    if kana >= 2 and kana * 4 >= han * 0.2:
        return "ja"
    if han >= 2:
        return "zh"
    occurrences = Counter(words(joined))
    # the stop words the text holds (a set intersection), not a lookup of every stop word
    counts = {lang: sum(occurrences[word] for word in occurrences.keys() & stop) for lang, stop in STOPWORDS.items()}
    best = max(counts, key=lambda lang: (counts[lang], lang == "en"))
    return best if counts[best] > 0 else "en"


def clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"

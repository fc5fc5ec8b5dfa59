"""The query as terms: normalized words, LIKE patterns, tsquery text, terms a text holds."""

from __future__ import annotations

import re
from collections.abc import Sequence

from memory_pipelines.rules.text import ALL_STOPWORDS

MAX_QUERY_CHARS = 1000
MAX_TERMS = 16
_TERM = re.compile(r"\w+", re.UNICODE)


def normalize_query(text: str) -> str:
    """Queries are data: cut to 1,000 characters and reduced to words for text matching."""
    return " ".join(_TERM.findall(text[:MAX_QUERY_CHARS]))


def query_terms(text: str) -> list[str]:
    words = [w.casefold() for w in _TERM.findall(text[:MAX_QUERY_CHARS])]
    terms = [w for w in dict.fromkeys(words) if w not in ALL_STOPWORDS and (len(w) > 1 or w.isdigit())]
    return terms[:MAX_TERMS]


def _escape_like(term: str) -> str:
    return term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _patterns(terms: Sequence[str]) -> list[str]:
    return [f"%{_escape_like(t)}%" for t in terms]


def _tsquery(terms: Sequence[str], prefix: bool = False) -> str:
    # terms are \w+ only, so the OR query cannot carry tsquery syntax; no terms: an empty
    # query, which matches nothing
    return " | ".join(t + ":*" if prefix else t for t in terms)


def _terms_hit(text: str, terms: Sequence[str]) -> int:
    folded = text.casefold()
    return sum(1 for t in terms if t in folded)

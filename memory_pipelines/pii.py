"""A PII sanitizer: e-mail addresses, phone numbers, card numbers (Luhn-checked), IBANs,
IP addresses, API keys and tokens are replaced by `[REDACTED:kind]` before anything is
persisted or exported. Deterministic and conservative: a number is a card only when the
Luhn check holds, an IBAN only when its mod-97 check does."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

_EMAIL = re.compile(r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+\b")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?\b")
_CARD = re.compile(r"\b[2-6](?:[ -]?\d){11,18}\b")  # issuers start with 2-6
# an international number (+CC ...), an area code in parentheses, or 3-3-4 with dashes or dots
_PHONE = re.compile(r"(?<![\w.])(?:\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){2,4}[ .-]?\d{2,4}"
                    r"|\(\d{2,4}\)\s?\d{3,4}[ .-]\d{3,4}|\d{3}[.-]\d{3}[.-]\d{4})\b")
_IPV4 = re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b")
_IPV6 = re.compile(r"\b(?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}\b")
_TOKEN = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{16,}|ghp_[A-Za-z0-9]{20,}|gho_[A-Za-z0-9]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}"
    r"|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_-]{30,}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})\b"
    r"|(?i:(?:api[_-]?key|secret|token|password|passwd)\s*[:=]\s*)[^\s\"']{8,}")
# loopback and documentation addresses are configuration, not personal data
_SAFE_IPS = ("127.", "0.0.0.0")


@dataclass(frozen=True)
class Sanitized:
    text: str
    kinds: tuple[str, ...]


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _iban_ok(text: str) -> bool:
    compact = text.replace(" ", "")
    rearranged = compact[4:] + compact[:4]
    number = "".join(str(int(ch, 36)) for ch in rearranged)
    return 15 <= len(compact) <= 34 and int(number) % 97 == 1


def _never(_match: re.Match[str]) -> bool:
    return False


_DIGIT = re.compile(r"\d")
# (kind, pattern, hint, keep), applied in this order. The hint is what every match of the
# pattern holds, found in one quick scan: most texts hold no digit, `@` or `:`, and the
# patterns needing one are then skipped. `keep` spares a match that is not what it looks like.
PATTERNS: tuple[tuple[str, re.Pattern[str], re.Pattern[str], Callable[[re.Match[str]], bool]], ...] = (
    ("token", _TOKEN, re.compile(r"sk-|gh[po]_|xox[abpr]-|AKIA|AIza|eyJ|[:=]"), _never),
    ("email", _EMAIL, re.compile("@"), _never),
    ("iban", _IBAN, _DIGIT, lambda m: not _iban_ok(m.group(0))),
    ("card", _CARD, _DIGIT, lambda m: not _luhn(re.sub(r"\D", "", m.group(0)))),
    ("ip", _IPV4, _DIGIT, lambda m: m.group(0).startswith(_SAFE_IPS)),
    ("ip", _IPV6, re.compile(":"), _never),
    ("phone", _PHONE, _DIGIT, lambda m: len(re.sub(r"\D", "", m.group(0))) < 8),
)


def sanitize(text: str) -> Sanitized:
    kinds: list[str] = []
    for kind, pattern, hint, keep in PATTERNS:
        if not hint.search(text):
            continue

        def replace(match: re.Match[str], kind: str = kind, keep=keep) -> str:
            if keep(match):
                return match.group(0)
            kinds.append(kind)
            return f"[REDACTED:{kind}]"
        text = pattern.sub(replace, text)
    return Sanitized(text, tuple(sorted(set(kinds))))

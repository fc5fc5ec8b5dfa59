"""A PII sanitizer: e-mail addresses, phone numbers, card numbers (Luhn-checked), IBANs,
IP addresses, API keys and tokens are replaced by `[REDACTED:kind]` before anything is
persisted or exported. Deterministic and conservative: a number is a card only when the
Luhn check holds, an IBAN only when its mod-97 check does."""

from __future__ import annotations

import re
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


# what a text must hold for each pattern to match in it (a scan each, far cheaper than the
# patterns': most texts hold no digit, `@` or `:`, and then the patterns needing one are skipped)
_DIGIT = re.compile(r"\d")
_HINTS = {
    _TOKEN: re.compile(r"sk-|gh[po]_|xox[abpr]-|AKIA|AIza|eyJ|[:=]"),
    _EMAIL: re.compile("@"),
    _IBAN: _DIGIT, _CARD: _DIGIT, _IPV4: _DIGIT, _PHONE: _DIGIT,
    _IPV6: re.compile(":"),
}


def sanitize(text: str) -> Sanitized:
    kinds: list[str] = []

    def sub(pattern: re.Pattern[str], kind: str, text: str, keep=lambda m: False) -> str:
        if not _HINTS[pattern].search(text):
            return text

        def replace(match: re.Match[str]) -> str:
            if keep(match):
                return match.group(0)
            kinds.append(kind)
            return f"[REDACTED:{kind}]"
        return pattern.sub(replace, text)

    text = sub(_TOKEN, "token", text)
    text = sub(_EMAIL, "email", text)
    text = sub(_IBAN, "iban", text, keep=lambda m: not _iban_ok(m.group(0)))
    text = sub(_CARD, "card", text, keep=lambda m: not _luhn(re.sub(r"\D", "", m.group(0))))
    text = sub(_IPV4, "ip", text, keep=lambda m: m.group(0).startswith(_SAFE_IPS))
    text = sub(_IPV6, "ip", text)
    text = sub(_PHONE, "phone", text, keep=lambda m: len(re.sub(r"\D", "", m.group(0))) < 8)
    return Sanitized(text, tuple(sorted(set(kinds))))

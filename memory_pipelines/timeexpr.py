"""Explicit times in a question ("in May", "last week", "two years ago", "in 2025"),
read relative to a `now`, as the range of conversation time search keeps (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

MONTHS = {name: number for number, names in enumerate((
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
    ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"), ("november", "nov"),
    ("december", "dec")), start=1) for name in names}
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple of": 2, "few": 3}
UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}

_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_COUNT = r"(\d+|" + "|".join(sorted(map(re.escape, NUMBERS), key=len, reverse=True)) + r")"
_AGO = re.compile(rf"\b{_COUNT}\s+(day|week|month|year)s?\s+ago\b")
_MONTH_YEAR = re.compile(rf"\b(?:(in|during|since|from|of|on|by|until)\s+)?({_MONTH})\.?(?:,?\s+(\d{{4}}))?\b")
_YEAR = re.compile(r"\b(?:in|during|of)\s+(\d{4})\b")
_RELATIVE = re.compile(r"\b(last|this|past|previous)\s+(week|month|year)\b")
_DAY_WORD = re.compile(r"\b(yesterday|today|day before yesterday)\b")
_WEEKDAY = re.compile(rf"\b(?:last|on|this)\s+({'|'.join(WEEKDAYS)})\b")


@dataclass(frozen=True)
class TimeRange:
    since: datetime
    until: datetime
    phrase: str  # the words it was read from


def _day(moment: datetime) -> datetime:
    return moment.replace(hour=0, minute=0, second=0, microsecond=0)


def _month(year: int, month: int, tz) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=tz)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=tz)
    return start, end


def time_range(text: str, now: datetime) -> TimeRange | None:
    """The first explicit time the question names, as a half-open range; None when it names
    none. A month without a year is its latest occurrence not after `now`."""
    folded = text.casefold()
    tz = now.tzinfo
    today = _day(now)
    if m := _AGO.search(folded):
        count = int(m.group(1)) if m.group(1).isdigit() else NUMBERS[m.group(1)]
        span = UNIT_DAYS[m.group(2)]
        centre = today - timedelta(days=count * span)
        half = timedelta(days=span // 2)  # "two years ago": the year around that day
        return TimeRange(centre - half, centre + half + timedelta(days=1), m.group(0))
    if m := _DAY_WORD.search(folded):
        back = {"today": 0, "yesterday": 1, "day before yesterday": 2}[m.group(1)]
        start = today - timedelta(days=back)
        return TimeRange(start, start + timedelta(days=1), m.group(0))
    if m := _WEEKDAY.search(folded):
        target = WEEKDAYS.index(m.group(1))
        back = (today.weekday() - target) % 7 or 7
        start = today - timedelta(days=back)
        return TimeRange(start, start + timedelta(days=1), m.group(0))
    if m := _RELATIVE.search(folded):
        which, unit = m.groups()
        if unit == "week":
            monday = today - timedelta(days=today.weekday())
            start = monday if which == "this" else monday - timedelta(days=7)
            return TimeRange(start, start + timedelta(days=7), m.group(0))
        if unit == "month":
            year, month = (now.year, now.month) if which == "this" else \
                (now.year - (now.month == 1), (now.month - 2) % 12 + 1)
            return TimeRange(*_month(year, month, tz), m.group(0))
        year = now.year if which == "this" else now.year - 1
        return TimeRange(datetime(year, 1, 1, tzinfo=tz), datetime(year + 1, 1, 1, tzinfo=tz), m.group(0))
    for m in _MONTH_YEAR.finditer(folded):
        preposition, name, year = m.groups()
        # "may" is a verb and "jan" a name too: those and abbreviations need "in ..." or a year
        if (name == "may" or len(name) <= 4) and not (preposition or year):
            continue
        month = MONTHS[name]
        if year:
            start, end = _month(int(year), month, tz)
        else:
            start, end = _month(now.year, month, tz)
            if start > now:
                start, end = _month(now.year - 1, month, tz)
        return TimeRange(start, end, m.group(0).strip())
    if m := _YEAR.search(folded):
        year = int(m.group(1))
        if 2000 <= year <= 2199:
            return TimeRange(datetime(year, 1, 1, tzinfo=tz), datetime(year + 1, 1, 1, tzinfo=tz), m.group(0))
    return None

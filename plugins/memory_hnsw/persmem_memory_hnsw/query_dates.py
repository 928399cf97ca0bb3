"""The times a search query names ("on 1 May, 2022", "in March 2023", "2023-05-01", "yesterday", "last
week", "3 days ago") as time ranges, so that memories from then rank higher (ranking.py). A memory counts as
from then when it was created from a day before the range to DAYS_AFTER days after it: a note is often written
some days after what it tells ("last week I went..."). Nothing here filters: since/until do that.

Only what is written out is read: a month and a year, a day with a month (and a year, else the latest such day
before now), a year after "in", "during", "since" or "of", ISO dates, and a few relative phrases (today,
yesterday, this/last week, month or year, N days/weeks/months ago, last Monday...). Times are UTC."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

DAYS_BEFORE = 1  # a memory created this many days before the range still counts (time zones, "tomorrow")
DAYS_AFTER = 10  # ... and this many days after it (a note written later about it)

_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10}

_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}(?: of)? {_MONTH}\.?,? {_YEAR}\b", re.I)
_MONTH_DAY_YEAR = re.compile(rf"\b{_MONTH}\.? {_DAY},? {_YEAR}\b", re.I)
_DAY_MONTH = re.compile(rf"\b{_DAY}(?: of)? {_MONTH}\b(?!\.?,? (?:19|20)\d\d)", re.I)
_MONTH_DAY = re.compile(rf"\b{_MONTH}\.? {_DAY}\b(?!,? (?:19|20)\d\d)(?!\d)", re.I)
_MONTH_YEAR = re.compile(rf"\b{_MONTH}\.?,? (?:of )?{_YEAR}\b", re.I)
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_YEAR_ALONE = re.compile(rf"\b(?:in|during|since|of|throughout) {_YEAR}\b", re.I)
_RELATIVE = re.compile(r"\b(today|tonight|yesterday|(?:this|last|past|previous) (?:week|month|year)"
                       r"|(\d+|an?|one|two|three|four|five|six|seven|eight|nine|ten) (day|week|month)s? ago"
                       rf"|last ({'|'.join(_WEEKDAYS)}))\b", re.I)


def _month(name: str) -> int:
    return [m[:3] for m in _MONTHS].index(name[:3].lower()) + 1


def _day(year: int, month: int, day: int) -> tuple[datetime, datetime] | None:
    try:
        start = datetime(year, month, day, tzinfo=timezone.utc)
    except ValueError:  # 31 February
        return None
    return start, start + timedelta(days=1)


def _month_range(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=timezone.utc)
    return start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=timezone.utc)


def _months_back(today: datetime, n: int) -> tuple[datetime, datetime]:
    index = today.year * 12 + today.month - 1 - n
    return _month_range(index // 12, index % 12 + 1)


def _latest_before(today: datetime, month: int, day: int) -> tuple[datetime, datetime] | None:
    """The day `month`/`day` of this year, or of last year if that is still to come."""
    found = _day(today.year, month, day)
    if found is not None and found[0] > today:
        found = _day(today.year - 1, month, day)
    return found


def _relative(match: re.Match, today: datetime) -> tuple[datetime, datetime] | None:
    phrase = match.group(1).lower()
    day = timedelta(days=1)
    if phrase in ("today", "tonight"):
        return today, today + day
    if phrase == "yesterday":
        return today - day, today
    if match.group(4):  # last Monday
        back = (today.weekday() - _WEEKDAYS.index(match.group(4).lower())) % 7 or 7
        return today - back * day, today - (back - 1) * day
    if match.group(2):  # N days/weeks/months ago
        count = int(match.group(2)) if match.group(2).isdigit() else _NUMBERS[match.group(2).lower()]
        unit = match.group(3).lower()
        if unit == "month":
            return _months_back(today, count)
        width = 7 if unit == "week" else 1
        return today - count * width * day, today - (count * width - width) * day
    which, unit = phrase.split()
    back = 0 if which == "this" else 1
    if unit == "week":
        start = today - today.weekday() * day - back * 7 * day
        return start, start + 7 * day
    if unit == "month":
        return _months_back(today, back)
    return datetime(today.year - back, 1, 1, tzinfo=timezone.utc), datetime(today.year - back + 1, 1, 1,
                                                                             tzinfo=timezone.utc)


def named_ranges(query: str, now: float) -> list[tuple[float, float]]:
    """The time ranges `query` names, as (start, end) timestamps; [] when it names none. `now` places the
    relative ones."""
    today = datetime.fromtimestamp(now, timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    found: list[tuple[datetime, datetime] | None] = []
    for m in _DAY_MONTH_YEAR.finditer(query):
        found.append(_day(int(m.group(3)), _month(m.group(2)), int(m.group(1))))
    for m in _MONTH_DAY_YEAR.finditer(query):
        found.append(_day(int(m.group(3)), _month(m.group(1)), int(m.group(2))))
    for m in _ISO_DAY.finditer(query):
        found.append(_day(int(m.group(1)), int(m.group(2)), int(m.group(3))))
    for m in _DAY_MONTH.finditer(query):
        found.append(_latest_before(today, _month(m.group(2)), int(m.group(1))))
    for m in _MONTH_DAY.finditer(query):
        found.append(_latest_before(today, _month(m.group(1)), int(m.group(2))))
    if not found:  # a month or a year only when no day is named ("on 3 May, 2023" is not also "May 2023")
        found += [_month_range(int(m.group(2)), _month(m.group(1))) for m in _MONTH_YEAR.finditer(query)]
        if not found:
            found += [(datetime(int(m.group(1)), 1, 1, tzinfo=timezone.utc),
                       datetime(int(m.group(1)) + 1, 1, 1, tzinfo=timezone.utc)) for m in _YEAR_ALONE.finditer(query)]
    found += [_relative(m, today) for m in _RELATIVE.finditer(query)]
    return [(start.timestamp(), end.timestamp()) for start, end in filter(None, found)]


def around(ranges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """`ranges` widened to the creation times that count as from then (DAYS_BEFORE, DAYS_AFTER)."""
    return [(start - DAYS_BEFORE * 86400.0, end + DAYS_AFTER * 86400.0) for start, end in ranges]

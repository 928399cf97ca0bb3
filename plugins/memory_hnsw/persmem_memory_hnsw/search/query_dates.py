"""The times a search query names ("on 1 May, 2022", "in March 2023", "2023-05-01", "yesterday", "last
week", "3 days ago") as time ranges, so that memories from then rank higher (search/ranking.py). A memory counts as
from then when it was created from a day before the range to DAYS_AFTER days after it: a note is often written
some days after what it tells ("last week I went..."). Nothing here filters: since/until do that.

Only what is written out is read: a month and a year, a day with a month (and a year, else the latest such day
before now; "may" and "march" in lower case only with a year), a year after "in", "during", "throughout" or
"since" (since: until now), ISO dates, and a few relative phrases (today, yesterday, this/last week, month or
year, N days/weeks/months ago, last Monday...). Times are UTC."""

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
_ISO_DAY = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})(?!\d)")
_YEAR_ALONE = re.compile(rf"\b(in|during|since|throughout) {_YEAR}\b", re.I)
_RELATIVE = re.compile(r"\b(today|tonight|yesterday|(?:this|last|past|previous) (?:week|month|year)"
                       r"|(\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten) (day|week|month)s? ago"
                       rf"|last ({'|'.join(_WEEKDAYS)}))\b", re.I)


def _month(name: str) -> int:
    return [m[:3] for m in _MONTHS].index(name[:3].lower()) + 1


def _a_month(name: str) -> bool:
    """Is `name` meant as a month where no year follows: "may" and "march" are also words ("step 3 may fail",
    "march 5 miles"), so written in lower case they count only next to a year."""
    return not (name.islower() and name[:3] in ("may", "mar"))


def _day(year: int, month: int, day: int) -> tuple[datetime, datetime]:
    """The day; ValueError for 31 February, OverflowError for 9999-12-31 (_read skips both)."""
    start = datetime(year, month, day, tzinfo=timezone.utc)
    return start, start + timedelta(days=1)


def _month_range(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=timezone.utc)
    return start, datetime(year + month // 12, month % 12 + 1, 1, tzinfo=timezone.utc)


def _months_back(today: datetime, n: int) -> tuple[datetime, datetime]:
    index = today.year * 12 + today.month - 1 - n
    return _month_range(index // 12, index % 12 + 1)


def _latest_before(today: datetime, month: int, day: int) -> tuple[datetime, datetime]:
    """The day `month`/`day` of this year, or of last year if that is still to come."""
    found = _day(today.year, month, day)
    return _day(today.year - 1, month, day) if found[0] > today else found


def _relative(match: re.Match, today: datetime) -> tuple[datetime, datetime]:
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


def _year(m: re.Match, today: datetime) -> tuple[datetime, datetime]:
    year = int(m.group(2))
    start = datetime(year, 1, 1, tzinfo=timezone.utc)
    if m.group(1).lower() == "since":  # since 2022: from then until now
        return start, max(today + timedelta(days=1), start + timedelta(days=366))
    return start, datetime(year + 1, 1, 1, tzinfo=timezone.utc)


def named_ranges(query: str, now: float) -> list[tuple[float, float]]:
    """The time ranges `query` names, as (start, end) timestamps; [] when it names none. `now` places the
    relative ones. A phrase that names no real day (31 February, 9999 days ago) is skipped."""
    today = datetime.fromtimestamp(now, timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    readers = [
        (_DAY_MONTH_YEAR, lambda m: _day(int(m.group(3)), _month(m.group(2)), int(m.group(1)))),
        (_MONTH_DAY_YEAR, lambda m: _day(int(m.group(3)), _month(m.group(1)), int(m.group(2)))),
        (_ISO_DAY, lambda m: _day(int(m.group(1)), int(m.group(2)), int(m.group(3)))),
        (_DAY_MONTH, lambda m: _latest_before(today, _month(m.group(2)), int(m.group(1)))
         if _a_month(m.group(2)) else None),
        (_MONTH_DAY, lambda m: _latest_before(today, _month(m.group(1)), int(m.group(2)))
         if _a_month(m.group(1)) else None),
    ]
    # a month or a year only when no day is named ("on 3 May, 2023" is not also "May 2023")
    wider = [(_MONTH_YEAR, lambda m: _month_range(int(m.group(2)), _month(m.group(1)))),
             (_YEAR_ALONE, lambda m: _year(m, today))]
    found = _read(query, readers)
    for pattern, read in wider:
        if not found:
            found = _read(query, [(pattern, read)])
    found += _read(query, [(_RELATIVE, lambda m: _relative(m, today))])
    return [(start.timestamp(), end.timestamp()) for start, end in found]


def _read(query: str, readers) -> list[tuple[datetime, datetime]]:
    found = []
    for pattern, read in readers:
        for m in pattern.finditer(query):
            try:
                span = read(m)
            except (OverflowError, ValueError):  # 31 February, year 0, or past year 9999
                continue
            if span is not None:
                found.append(span)
    return found


def around(ranges: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """`ranges` widened to the creation times that count as from then (DAYS_BEFORE, DAYS_AFTER)."""
    return [(start - DAYS_BEFORE * 86400.0, end + DAYS_AFTER * 86400.0) for start, end in ranges]

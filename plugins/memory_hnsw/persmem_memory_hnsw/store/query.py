"""What a caller asks the store for, read from what it typed: tags, labels (project, type), dates, and the
Filters they make. The MCP tools and the dashboard panel read their arguments here, so both accept and refuse
the same things with the same messages."""

from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from persmem_core.sdk import UserError, control_characters, printable


@dataclass
class Filters:
    """Which memories a search or a listing looks at (None / empty: any)."""

    project: str | None = None
    type: str | None = None
    author: str | None = None
    tags: list[str] = field(default_factory=list)  # any of them
    since: float | None = None  # created at or after (a timestamp)
    until: float | None = None  # created at or before

    def active(self) -> bool:
        return any((self.project, self.type, self.author, self.tags, self.since is not None, self.until is not None))


def shown(value, limit: int = 70) -> str:
    """A caller's value as a message quotes it: repr, cut to `limit` characters (a reply never echoes 1 MB)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(str(value))} characters)"


def parse_tags(tags: str | list[str] | None, what: str = "tags") -> list[str]:
    """Comma-separated tags or a list of them, stripped, without repeats or empty ones."""
    if tags is None:
        return []
    if not isinstance(tags, (str, list)) or not all(isinstance(tag, str) for tag in tags):
        raise UserError(f"{what} must be a comma-separated string or a list of strings, like \"auth,jwt\".")
    items = tags.split(",") if isinstance(tags, str) else tags
    cleaned = []
    for tag in items:
        tag = tag.strip()
        if tag and tag not in cleaned:
            if len(tag) > 64:
                raise UserError(f"tag {tag[:20]!r}... is longer than 64 characters.")
            check_visible_label(tag, "tag" if what == "tags" else f"a tag of {what}")
            cleaned.append(tag)
    return cleaned


def parse_label(value: str, what: str) -> str:
    """A project or a type: 1-64 characters, stripped, one line of visible text (check_visible_label)."""
    if value is not None and not isinstance(value, str):
        raise UserError(f"{what} must be a string of 1-64 characters, got {type(value).__name__}.")
    value = (value or "").strip()
    if not value or len(value) > 64:
        raise UserError(f"{what} must be 1-64 characters, got {value[:70]!r}.")
    check_visible_label(value, what)
    return value


def check_visible_label(value: str, what: str) -> None:
    """Refuse a label (project, type, tag, author) holding control or invisible characters: line breaks, tabs,
    escape sequences, bidirectional overrides, zero-width characters. A label is shown to people and to other
    agents' sessions; with those it could start a line that passes for something else (a heading, another
    entry) or look like another label."""
    hidden = control_characters(value)
    if hidden:
        suggestion = " ".join("".join(" " if c in hidden else c for c in value).split())[:64]
        kinds = ", ".join(dict.fromkeys(printable(c) for c in hidden[:5]))
        raise UserError(f"{what} {shown(value)} holds control or invisible characters ({kinds}): a project, type or "
                        "tag is one line of visible text, without line breaks, tabs, escape sequences or invisible "
                        "characters. Remove them"
                        + (f", e.g. {suggestion!r}." if suggestion else ", and name it in plain words."))


def parse_when(value: str | None, what: str, *, through_day: bool = False) -> float | None:
    """An ISO date or time as a timestamp (UTC unless it says otherwise); with `through_day`, a date alone
    means the end of that day (until=2026-11-22 includes the 22nd)."""
    if value in (None, ""):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"{what} must be an ISO date or time like 2026-11-22 or 2026-11-22T10:00:00Z, got {shown(value)}.") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    if through_day and len(value.strip()) == 10:  # a date alone: through that whole day
        return parsed.timestamp() + 86399.999
    return parsed.timestamp()


EARLIEST = datetime(1900, 1, 1, tzinfo=timezone.utc).timestamp()  # the oldest `created` accepted


def parse_created(value: str | None, what: str) -> float | None:
    """When a memory was said or written, as a caller gives it (an ISO date or time; None or "": now). A time
    more than a day ahead is refused: a memory from the future would outrank every later one by recency."""
    when = parse_when(value, what)
    if when is not None and when > time.time() + 86400:
        raise UserError(f"{what} {shown(value)} is in the future; give when it was said or written, or leave it out "
                        "for now.")
    if when is not None and when < EARLIEST:
        raise UserError(f"{what} {shown(value)} is before 1900; give when it was said or written, or leave it out "
                        "for now.")
    return when


def parse_filters(*, project: str | None = None, memory_type: str | None = None, author: str | None = None,
                  tags: str | list[str] | None = None, since: str | None = None, until: str | None = None) -> Filters:
    """Filters from a caller's values, as memory_search names them ("" or None: no filter on that). A range that
    can match nothing (since after until) is refused rather than answered with a silent empty list."""
    filters = Filters(project=project or None, type=memory_type or None, author=author or None, tags=parse_tags(tags),
                      since=parse_when(since, "since"), until=parse_when(until, "until", through_day=True))
    if filters.since is not None and filters.until is not None and filters.since > filters.until:
        raise UserError(f"since ({since}) is after until ({until}), so nothing can match; swap them, or drop one "
                        "to leave that side of the range open.")
    return filters


def did_you_mean(what: str, value: str, existing) -> str:
    """A hint for a `what` (project, collection, ...) named `value` that does not exist: the closest existing
    names, or the list of them when few and none is close."""
    names = sorted(set(existing))
    if not names:
        return f"no {what} {shown(value)}: there is none yet."
    value = str(value)[:100]  # longer than any name: compared by its start, never quoted whole
    close = difflib.get_close_matches(value, names, n=3, cutoff=0.6)
    close += [n for n in names if n.casefold() == value.casefold() and n not in close]  # a case slip
    if close:
        return f"no {what} {shown(value)}; did you mean {' or '.join(repr(n) for n in close)}?"
    if len(names) <= 10:
        return f"no {what} {shown(value)}; the existing ones are {', '.join(repr(n) for n in names)}."
    return f"no {what} {shown(value)} (and none with a close name among the {len(names)} there are)."

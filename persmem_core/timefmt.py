"""Times as persmem shows them to people: ISO 8601 in UTC, to the second ("2026-11-03T10:04:05Z").

Stored values are epoch seconds or ISO strings (the agent registry keeps microseconds to tell a re-added
agent from the old one); neither is what a person should read."""

from __future__ import annotations

from datetime import UTC, datetime


def iso_utc(value: str | float | int | datetime | None) -> str:
    """`value` (epoch seconds, an ISO 8601 string or a datetime; naive ones are taken as UTC) as
    'YYYY-MM-DDTHH:MM:SSZ'; None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        moment = datetime.fromisoformat(value)
    else:
        moment = datetime.fromtimestamp(float(value), UTC)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

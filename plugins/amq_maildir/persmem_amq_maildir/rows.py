"""A message as the tools, the live feed, the web endpoint and the Mail panel show it: its headers, headers and
body, a row of a listing across inboxes (which inbox, read or not), the newest rows first; and the note a listing
carries when files of a mailbox were not valid messages and went to its quarantine."""

from __future__ import annotations

from .maildir import Entry, Quarantined


def headers(entry: Entry) -> dict:
    h = entry.message.header
    out = {"id": entry.id, "from": h.sender, "to": h.to, "subject": h.subject, "kind": h.kind,
           "priority": h.priority, "created": h.created}
    for key in ("thread", "reply_to", "recipients"):
        if getattr(h, key) is not None:
            out[key] = getattr(h, key)
    return out


def full(entry: Entry) -> dict:
    """Headers and body. The file's name and format version stay inside: the id is all a caller needs."""
    return headers(entry) | {"body": entry.message.body}


def row(box: str, entry: Entry, body: bool = True) -> dict:
    """A message as listings across inboxes show it: headers (and body), the inbox it is in, read or not."""
    return (full(entry) if body else headers(entry)) | {"to": box, "status": "unread" if entry.folder == "new" else "read"}


def newest(pairs: list[tuple[str, Entry]], limit: int, body: bool = True) -> list[dict]:
    """The `limit` most recent of (inbox, entry) pairs, newest first, as rows."""
    pairs = sorted(pairs, key=lambda p: p[1].message.header.created, reverse=True)
    return [row(box, entry, body) for box, entry in pairs[:limit]]


def with_problems(result: dict, bad: list[Quarantined]) -> dict:
    """`result` with the files set aside in quarantine named, when there are any."""
    if bad:
        result["quarantined"] = [{"file": b.name, "folder": b.folder, "reason": b.reason} for b in bad]
        result["note"] = ("some files in the mailbox were not valid messages; they were moved to the mailbox's "
                          "quarantine/ folder (see persmem doctor)")
    return result

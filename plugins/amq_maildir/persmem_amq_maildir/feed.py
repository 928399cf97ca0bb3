"""The live mail feed shared by the /amq event stream (web.py) and the dashboard's mail panel (panels.py):
unread counts per mailbox and the new messages a caller may see, as Server-Sent Event items."""

from __future__ import annotations

import json

import anyio

from .maildir import Entry
from .rows import row
from .store import MailStore

WAKE_SECONDS = 0.1  # how often a stream looks for sends made by this process


def snapshot(store: MailStore, caller: str) -> tuple[dict[str, int], dict[tuple[str, str], Entry]]:
    """Unread counts per mailbox, and the unread messages the caller may see, by (mailbox, file)."""
    counts, visible = {}, {}
    granted = store.readable(caller)
    for name in store.roster():
        entries, _ = store.box(name).scan(("new",))  # parsed headers come from the cache
        counts[name] = len(entries)
        whole = name == caller or granted is None or name in granted
        for entry in entries:
            if whole or entry.message.header.sender == caller:
                visible[(name, entry.name)] = entry
    return counts, visible


async def event_stream(store: MailStore, caller: str, body: bool = False):
    """SSE items: `unread` counts at once and on every change, `message` for each new message the caller may
    see (headers, or with `body` the whole message)."""
    counts, seen = await anyio.to_thread.run_sync(snapshot, store, caller)
    yield {"event": "unread", "data": json.dumps({"you": caller, "unread": counts})}
    generation = store.generation
    waited = 0.0
    while True:
        await anyio.sleep(WAKE_SECONDS)
        waited += WAKE_SECONDS
        if store.generation == generation and waited < store.config.poll_seconds:
            continue
        generation, waited = store.generation, 0.0
        new_counts, now = await anyio.to_thread.run_sync(snapshot, store, caller)
        for key, entry in now.items():
            if key not in seen:
                yield {"event": "message", "id": entry.id, "data": json.dumps(row(key[0], entry, body))}
        seen = now
        if new_counts != counts:
            counts = new_counts
            yield {"event": "unread", "data": json.dumps({"you": caller, "unread": counts})}

"""The mail plugin's dashboard panel: unread badges, the live feed (Server-Sent Events, colour-coded by
sender, click to expand) and a thread view. Plain data, a template and a small script: no web framework."""

from __future__ import annotations

from importlib import resources

from .maildir import Entry
from .message import SUFFIX
from .store import full

FILES = resources.files("persmem_amq_maildir") / "panel"


def _store(view):
    from .plugin import store_for

    return store_for(view.host)


def context(view) -> dict:
    store = _store(view)
    roster = store.roster()
    colors = {name: i % 6 for i, name in enumerate(roster)}
    thread = view.param("thread")
    if thread:
        messages = store.thread(view.agent, thread)["messages"]
    else:
        pairs, _ = store.visible_entries(view.agent)
        pairs.sort(key=lambda p: p[1].message.header.created, reverse=True)
        messages = [_row(box, e) for box, e in pairs[:100]]
    return {"agents": store.agents(view.agent)["agents"], "messages": messages, "colors": colors,
            "thread": thread or None}


def _row(box: str, entry: Entry) -> dict:
    return full(entry) | {"to": box, "status": "unread" if entry.folder == "new" else "read"}


async def events(view):
    """The /amq event stream, with each new message's body added for the feed."""
    import json

    from .web import _stream

    store = _store(view)
    async for item in _stream(store, view.agent):
        if item["event"] == "message":
            data = json.loads(item["data"])
            entry = store.box(data["to"]).get(data["id"] + SUFFIX)
            if entry is not None:
                item = item | {"data": json.dumps(_row(data["to"], entry))}
        yield item


def register(register):
    register("mail", title="Mail", template=(FILES / "mail.html").read_text(), context=context, order=30,
             events=events, script=(FILES / "mail.js").read_text())

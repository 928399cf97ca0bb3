"""The mail plugin's dashboard panel: unread badges, the live feed (Server-Sent Events, colour-coded by
sender, click to expand) and a thread view. Plain data, a template and a small script: no web framework."""

from __future__ import annotations

from importlib import resources

from .feed import event_stream
from .service import service
from .store import newest

FILES = resources.files("persmem_amq_maildir") / "panel"


def _store(view):
    return service(view.host)


def context(view) -> dict:
    store = _store(view)
    roster = store.roster()
    colors = {name: i % 6 for i, name in enumerate(roster)}
    thread = view.param("thread")
    if thread:
        messages = store.thread(view.agent, thread)["messages"]
    else:
        messages = newest(store.visible_entries(view.agent)[0], 100)
    return {"agents": store.agents(view.agent)["agents"], "messages": messages, "colors": colors,
            "thread": thread or None}


async def events(view):
    """The /amq event stream, with each new message's body for the feed."""
    async for item in event_stream(_store(view), view.agent, body=True):
        yield item


def register(register):
    register("mail", title="Mail", template=(FILES / "mail.html").read_text(), context=context, order=30,
             events=events, script=(FILES / "mail.js").read_text())

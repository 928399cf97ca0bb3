"""The mail plugin's dashboard panel: unread badges, the live feed (Server-Sent Events, colour-coded by
sender, click to expand) and a thread view. Plain data, a template and a small script: no web framework.

Bodies are Markdown (assistants write it): each is shown as the dashboard's sanitised rendering
(`view.markdown`), made here in the worker thread, for the page and for each live message alike."""

from __future__ import annotations

import json
from importlib import resources

import anyio

from .feed import event_stream
from .service import service
from .rows import newest

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
    for message in messages:
        message["body_html"] = view.markdown(message.get("body"))
    return {"agents": store.agents(view.agent)["agents"], "messages": messages, "colors": colors,
            "thread": thread or None}


async def events(view):
    """The /amq event stream, with each new message's body (and its rendering) for the feed."""
    async for item in event_stream(_store(view), view.agent, body=True):
        if item.get("event") == "message":
            message = json.loads(item["data"])
            message["body_html"] = await anyio.to_thread.run_sync(view.markdown, message.get("body"))
            item = {**item, "data": json.dumps(message)}
        yield item


def register(register):
    register("mail", title="Mail", template=(FILES / "mail.html").read_text(), context=context, order=30,
             events=events, script=(FILES / "mail.js").read_text())

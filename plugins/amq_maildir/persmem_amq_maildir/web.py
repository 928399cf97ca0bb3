"""GET /amq/... : unread counts, the recent feed and a live event stream, for the dashboard and Chorus.

Mounted by the host with `auth="agent"`: every request carries an agent's bearer token (or secret
path); the caller sees counts for every mailbox but message headers only for mail it may see (sent to it,
sent by it, or in an inbox `[amq] readers` grants it).

- GET /amq/unread            -> {"you": "kite", "unread": {"kite": 0, "wren": 2}}
- GET /amq/messages?limit=20 -> {"messages": [...]} newest first, with bodies (the amq_timeline view)
- GET /amq/events            -> text/event-stream: `unread` (counts, at once and on every change) and
                                `message` (headers of each newly delivered message you may see)
"""

from __future__ import annotations

import anyio
from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from persmem_core.sdk import UserError, agent_of_scope

from .feed import event_stream
from .rows import newest
from .store import MailStore

PING_SECONDS = 15


def build_app(get_store) -> Starlette:
    def caller(request: Request) -> str:
        agent = agent_of_scope(request.scope)  # always there behind auth="agent"; never guessed if not
        if not agent:
            raise HTTPException(401, "no authenticated agent")
        return agent

    async def unread(request: Request) -> JSONResponse:
        store: MailStore = get_store()
        counts = await anyio.to_thread.run_sync(store.unread_counts)
        return JSONResponse({"you": caller(request), "unread": counts})

    async def messages(request: Request) -> JSONResponse:
        store: MailStore = get_store()
        try:
            limit = int(request.query_params.get("limit", "20"))
            result = await anyio.to_thread.run_sync(lambda: _feed(store, caller(request), limit))
        except (ValueError, UserError) as exc:
            return JSONResponse({"error": str(exc) if isinstance(exc, UserError) else "limit must be a number"},
                                status_code=400)
        return JSONResponse(result)

    async def events(request: Request) -> EventSourceResponse:
        store: MailStore = get_store()
        return EventSourceResponse(event_stream(store, caller(request)), ping=PING_SECONDS)

    return Starlette(routes=[Route("/unread", unread), Route("/messages", messages), Route("/events", events)])


def _feed(store: MailStore, caller: str, limit: int) -> dict:
    if not 1 <= limit <= 200:
        raise UserError("limit must be from 1 to 200.")
    return {"you": caller, "messages": newest(store.visible_entries(caller)[0], limit)}

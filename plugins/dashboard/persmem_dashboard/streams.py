"""Dashboard event streams end when the login that opened them does: the agent is revoked, the session is
logged out (from another tab), or it expires.

A page checks its login once per request; a stream lives for hours, so it is checked continuously: a watcher
beside the stream cancels it within WATCH_SECONDS (an idle stream too, one that is waiting for mail), and
`app.py` checks the agent again before each item, so nothing written after a revocation reaches the stream. The
panel's generator is cancelled where it waits and the HTTP response is ended cleanly; the browser's EventSource
then reconnects, gets 401 and stops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio
from litestar.connection import ASGIConnection

from persmem_core.sdk import UserError

from .sessions import LoginSessionConfig, delete_stored, is_stored

log = logging.getLogger("persmem.dashboard")

WATCH_SECONDS = 0.25  # a look is one stat() of agents.json (re-read only when it changed) and one session read


def is_active(host, agent: str, credential: str | None) -> bool:
    """Whether `agent` exists, is not revoked, and still has the token it logged in with (`credential`, its
    hash, kept in the session at login): rotating a leaked token, or revoking the agent and adding it again,
    ends its dashboard logins too. A damaged registry counts as no: streams fail closed."""
    try:
        record = host.agents.agents().get(agent)
    except UserError:
        return False
    return record is not None and record.revoked is None and credential is not None and \
        record.token_sha256 == credential


def ends_with_the_login(host, sessions: LoginSessionConfig) -> Callable:
    """Route middleware for event streams: a logged-in agent's stream is cut when its login ends. Sits inside
    the session middleware, so the session (and its agent) is already loaded."""

    def middleware(app):
        async def guarded(scope, receive, send):
            connection = ASGIConnection(scope)
            agent = connection.session.get("agent") if connection.session else None
            credential = connection.session.get("credential") if connection.session else None
            if not agent or not is_active(host, agent, credential):
                await app(scope, receive, send)  # the handler refuses it
                return
            started = finished = ended = False

            async def tracking_send(message):
                nonlocal started, finished
                started = started or message["type"] == "http.response.start"
                finished = finished or (message["type"] == "http.response.body" and not message.get("more_body"))
                await send(message)

            async with anyio.create_task_group() as watching:
                async def watch():
                    nonlocal ended
                    while is_active(host, agent, credential) and await is_stored(sessions, connection):
                        await anyio.sleep(WATCH_SECONDS)
                    ended = True
                    await delete_stored(sessions, connection)  # a revoked agent's session goes with its stream
                    log.info("dashboard: the login of %s ended (revoked, logged out or expired); its event stream "
                             "ends", agent)
                    watching.cancel_scope.cancel()

                watching.start_soon(watch)
                await app(scope, receive, tracking_send)
                watching.cancel_scope.cancel()  # the stream ended by itself: stop watching
            if ended and not started:  # the login ended before the stream began
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": b'{"error": "log in first"}'})
            elif ended and not finished:  # cut mid-stream: end the HTTP response, not the connection
                await send({"type": "http.response.body", "body": b"", "more_body": False})

        return guarded

    return middleware

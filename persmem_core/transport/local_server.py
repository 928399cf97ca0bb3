"""The owner's side of the local socket (`persmem_core.transport.ownership`): MCP for local clients (the owner's card:
owner_card.py).

Routes, on the socket only (never on a TCP port):
- `POST /mcp`: MCP (stateless Streamable HTTP, JSON answers; both protocol eras, chosen by the
  `MCP-Protocol-Version` header; a 2026-07-28 listen is an event stream), as the agent named in `X-Persmem-Agent`. The
  socket is 0600, so whoever connects is the home's own user, the same trust as a stdio server it starts;
  the agent is checked on every request (it must exist and not be revoked, or be [server] default_agent),
  so revoking an agent also ends the stdio sessions that speak for it.
- `GET /_local/owner`: who owns the home (pid, role, MCP URL): what a second `persmem serve` names.
- `POST /_local/handover`: a stdio owner lets go of the home so that `persmem serve` can take it (its own
  stdio client carries on through the new owner). An HTTP owner refuses: it is meant to stay.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.shared.inbound import MCP_METHOD_HEADER

from persmem_core.auth.agents import check_name
from persmem_core.auth.scope import AGENT_SCOPE_KEY, TRANSPORT_SCOPE_KEY
from persmem_core.invocation import persmem_line
from persmem_core.errors import UserError
from persmem_core.timefmt import iso_utc
from persmem_core.transport.owner_card import HANDOVER_PATH, OWNER_PATH, OwnerCard

if TYPE_CHECKING:
    from persmem_core.host import Host

log = logging.getLogger("persmem.local")

AGENT_HEADER = "x-persmem-agent"
STOPPING = ("the persmem server serving this listen stream stopped (it was restarted or handed the home over); "
            "listen again.")


def served_agent(host: Host, name: str | None) -> str:
    """The agent a local client may speak for: `name` (it must exist and not be revoked), or, without one,
    [server] default_agent, which needs no registry entry (a fresh home has no agents)."""
    default = host.config.server.default_agent
    name = check_name(name or default)
    record = host.agents.agents().get(name)
    if record is not None and record.revoked is not None:
        raise UserError(
            f"agent {name!r} was revoked ({iso_utc(record.revoked)}); it cannot be served. "
            f"`{persmem_line('agent', 'add', name)}` gives it new credentials, or choose another agent with --agent."
        )
    if record is None and name != default:
        raise UserError(
            f"no agent named {name!r}. Create it with `{persmem_line('agent', 'add', name)}`, pick one of "
            f"`{persmem_line('agent', 'list')}`, or leave out --agent to serve as {default!r}."
        )
    return name


def jsonrpc_error(message: str, status: int, code: int = -32600):
    """An HTTP answer whose body is a JSON-RPC error, which MCP clients show to the user as it is."""
    from starlette.responses import JSONResponse

    return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, status)


def build_local_app(host: Host, mcp_server, card: OwnerCard,
                    handover: Callable[[], Awaitable[None]] | None = None, route_specs=None):
    """The ASGI app served on the local socket. `handover` (stdio owners only) stops this owner. The plugins'
    agent routes (`register_routes(..., auth="agent")`, e.g. the hooks' endpoints) are mounted here too, as the
    agent in `X-Persmem-Agent`; pages that check their own login (the dashboard) are not."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route

    from persmem_core.transport.http_limits import JsonRpcBodyLimit

    sessions = StreamableHTTPSessionManager(app=mcp_server._lowlevel_server, stateless=True, json_response=True,
                                            max_request_body_size=host.config.server.max_body_bytes)

    class MCPEndpoint:  # an ASGI app (a plain function would be taken for a request handler)
        def __init__(self):
            self.listens: set[anyio.CancelScope] = set()

        async def __call__(self, scope, receive, send):
            # A 2026-07-28 listen stream never ends by itself: tracked so that stopping ends it at once (its client
            # hears the stream drop and listens again, at the next owner) instead of holding up a handover for the
            # whole graceful timeout. The header is checked against the body before the stream starts.
            if dict(scope["headers"]).get(MCP_METHOD_HEADER.encode()) != b"subscriptions/listen":
                await sessions.handle_request(scope, receive, send)
                return
            sent = {"started": False, "done": False}

            async def watched_send(message):
                sent["started"] |= message["type"] == "http.response.start"
                sent["done"] |= message["type"] == "http.response.body" and not message.get("more_body", False)
                await send(message)

            with anyio.CancelScope() as listen:
                self.listens.add(listen)
                try:
                    await sessions.handle_request(scope, receive, watched_send)
                finally:
                    self.listens.discard(listen)
            if listen.cancelled_caught and not sent["done"]:  # end the answer properly: no half response
                if sent["started"]:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                else:
                    await jsonrpc_error(STOPPING, 503, -32603)(scope, receive, send)

        def end_listens(self) -> None:
            for listen in list(self.listens):
                listen.cancel()

    endpoint = MCPEndpoint()

    async def owner(request):
        return JSONResponse(asdict(card))

    async def hand_over(request):
        if handover is None:
            return JSONResponse({"error": "this owner is `persmem serve` and does not hand over"}, 409)
        await handover()
        return JSONResponse({"handed_over": True})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        async with sessions.run():
            yield

    routes = [Route("/mcp", endpoint=endpoint, methods=["POST", "GET", "DELETE"]),
              Route(OWNER_PATH, endpoint=owner), Route(HANDOVER_PATH, endpoint=hand_over, methods=["POST"])]
    specs = host.collect_routes() if route_specs is None else route_specs
    routes += [Mount(spec.prefix, app=spec.app) for spec in specs if spec.auth == "agent"]
    app = Starlette(routes=routes, lifespan=lifespan)
    return LocalAgentMiddleware(JsonRpcBodyLimit(app, host.config.server.max_body_bytes), host,
                                end_listen_streams=endpoint.end_listens)


class LocalAgentMiddleware:
    """Puts the agent named in `X-Persmem-Agent` into the request, as the HTTP auth middleware does for a
    bearer token; `/_local/*` needs no agent."""

    def __init__(self, app, host: Host, end_listen_streams: Callable[[], None] = lambda: None):
        self.app, self.host, self.end_listen_streams = app, host, end_listen_streams

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"].startswith("/_local/"):
            await self.app(scope, receive, send)
            return
        claimed = dict(scope["headers"]).get(AGENT_HEADER.encode(), b"").decode("latin-1") or None
        try:
            agent = served_agent(self.host, claimed)
        except UserError as exc:
            await jsonrpc_error(str(exc), 403)(scope, receive, send)
            return
        scope[AGENT_SCOPE_KEY] = agent
        scope[TRANSPORT_SCOPE_KEY] = "stdio"
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=agent, scopes=[]))
        await self.app(scope, receive, send)


class LocalListener:
    """uvicorn on the local socket, inside an event loop that is already running (the HTTP server's, or a
    stdio process's). It leaves signals to whoever runs the loop."""

    def __init__(self, app, sock):
        import uvicorn

        class Server(uvicorn.Server):
            def capture_signals(self):
                return contextlib.nullcontext()

        config = uvicorn.Config(app, lifespan="on", access_log=False, log_level="warning", server_header=False,
                                timeout_graceful_shutdown=5)
        self.server, self.sock, self.app = Server(config), sock, app
        self._done = anyio.Event()

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until `stop()`; started (accepting) when `task_status.started()` fires."""
        async def announce_when_started():
            while not self.server.started and not self.server.should_exit:
                await anyio.sleep(0.01)
            task_status.started()

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(announce_when_started)
                await self.server.serve(sockets=[self.sock])
        finally:
            self._done.set()

    async def stop(self) -> None:
        """Stop accepting, let running requests finish (up to the graceful timeout), then return. Listen streams
        (which never finish) end at once."""
        if isinstance(self.app, LocalAgentMiddleware):
            self.app.end_listen_streams()
        self.server.should_exit = True
        await self._done.wait()



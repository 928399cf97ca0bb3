"""Who is calling, for every HTTP request.

An ASGI middleware in front of everything the server mounts:
1. Host/Origin checks (DNS rebinding): unexpected Host is 421, Origin 403.
2. The agent: a bearer token (`Authorization: Bearer pm_...`) or the agent's
   secret path prefix (`/<secret>/mcp`, for clients that cannot send
   headers). A missing, wrong or revoked credential is 401 with the same
   body for everyone, so the answer reveals nothing about which agents exist.
   Tokens in the query string are refused (they end up in logs).
3. While no agent has credentials and the server is bound to loopback with
   no public URL configured, requests run as the default agent.
The agent goes into the ASGI scope (`persmem.agent`) and into `scope["user"]`
so the MCP SDK binds each MCP session to the agent that opened it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from urllib.parse import parse_qsl

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from persmem_core.agents import AgentStore

log = logging.getLogger("persmem.http")

QUERY_SECRET_NAMES = {"token", "access_token", "api_key", "apikey", "key", "auth", "bearer"}
UNAUTHORIZED = {
    "error": "unauthorized",
    "message": "missing or invalid credentials. Send 'Authorization: Bearer <token>' with the token "
    "`persmem agent add NAME` printed, or use the agent's secret URL.",
}


def unauthorized(message: dict = UNAUTHORIZED) -> JSONResponse:
    return JSONResponse(message, status_code=401, headers={"WWW-Authenticate": 'Bearer realm="persmem"'})


class AgentAuthMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        agents: AgentStore,
        security: TransportSecuritySettings,
        anonymous_agent: Callable[[], str | None],
        open_prefixes: tuple[str, ...] = ("/healthz",),
    ):
        self.app = app
        self.agents = agents
        self.security = TransportSecurityMiddleware(security)
        self.anonymous_agent = anonymous_agent
        self.open_prefixes = open_prefixes

    def _is_open(self, path: str) -> bool:
        return any(path == p or path.startswith(p + "/") for p in self.open_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        rejected = await self.security.validate_request(request, is_post=False)
        if rejected is not None:
            await rejected(scope, receive, send)
            return

        first, sep, rest = scope["path"].lstrip("/").partition("/")
        shown_path = f"/<secret>/{rest}" if len(first) >= 32 else scope["path"]
        agent = self._agent_from_secret_path(scope)

        if any(name.lower() in QUERY_SECRET_NAMES for name, _ in parse_qsl(scope.get("query_string", b"").decode("latin-1"))):
            await self._respond(unauthorized({
                "error": "unauthorized",
                "message": "credentials in the URL query are refused (they end up in logs). "
                "Send 'Authorization: Bearer <token>' or use the agent's secret URL path.",
            }), scope, receive, send, shown_path)
            return

        header = request.headers.get("authorization")
        if header is not None:
            scheme, _, token = header.partition(" ")
            token_agent = self.agents.agent_for_token(token.strip()) if scheme.lower() == "bearer" else None
            if token_agent is None or (agent is not None and token_agent != agent):
                await self._respond(unauthorized(), scope, receive, send, shown_path)
                return
            agent = token_agent
        if agent is None and not self._is_open(scope["path"]):
            agent = self.anonymous_agent()
            if agent is None:
                await self._respond(unauthorized(), scope, receive, send, shown_path)
                return
        if agent is not None:
            self.agents.seen(agent)
            scope["persmem.agent"] = agent
            scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=agent, scopes=[]))
        await self._respond(self.app, scope, receive, send, shown_path, agent)

    def _agent_from_secret_path(self, scope: Scope) -> str | None:
        first, sep, rest = scope["path"].lstrip("/").partition("/")
        if len(first) < 32:
            return None
        agent = self.agents.agent_for_path_secret(first)
        if agent is None:
            return None
        new_path = "/" + rest if sep else "/"
        scope["path"] = new_path
        scope["raw_path"] = new_path.encode()
        return agent

    async def _respond(self, app: ASGIApp, scope, receive, send, shown_path: str, agent: str | None = None) -> None:
        status = {"code": 0}

        async def send_and_note(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await app(scope, receive, send_and_note)
        finally:
            log.info("%s %s %s agent=%s", scope.get("method", "WS"), shown_path, status["code"], agent or "-")

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
4. A credential that fails is answered after a delay that grows with the
   failures from that address, and logged as one line fail2ban can match
   (`persmem auth failure from ADDRESS`, see docs/deploy.md).
5. An answer lasts only as long as its credential: when the agent is revoked
   or its token rotated, a response still streaming (an event stream, MCP's
   GET stream) ends within a second, and nothing more is sent on it.
6. With OAuth on (persmem_core/auth/oauth), an OAuth access token (`pmat_...`) in
   `Authorization: Bearer` works on /mcp, as the agent the operator approved
   the client as, for as long as the token is unexpired and its grant and agent
   live (checked like an agent token, while the answer streams too). Every 401
   then names the protected-resource metadata (RFC 9728 `resource_metadata`),
   which is how a client finds where to sign in. The OAuth endpoints are open;
   on /token, /revoke and /register the Authorization header is the client's
   own credential, read by the endpoint, not by this middleware.
The agent goes into the ASGI scope (`persmem.agent`, read with `scope.agent_of_scope`) and into `scope["user"]`
so the MCP SDK binds each MCP session to the agent that opened it.

Request paths are logged with every segment long enough to be a secret path
replaced by `<secret>`, whatever form the request target took.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from urllib.parse import parse_qsl, quote

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from persmem_core.auth.agents import AgentStore
from persmem_core.auth.failures import AuthFailures
from persmem_core.auth.scope import AGENT_SCOPE_KEY
from persmem_core.errors import UserError
from persmem_core.auth.oauth.records import ACCESS_PREFIX

log = logging.getLogger("persmem.http")

QUERY_SECRET_NAMES = {"token", "access_token", "api_key", "apikey", "key", "auth", "bearer"}
SECRET_SEGMENT_CHARS = 32  # secret paths are 43 characters; a segment this long may be one, in any form
LOGGED_PATH_CHARS = 200
CREDENTIAL_CHECK_SECONDS = 0.5  # how often an open answer checks that its credential still holds
UNAUTHORIZED = {
    "error": "unauthorized",
    "message": "missing or invalid credentials. Send 'Authorization: Bearer <token>' with the token "
    "`persmem agent add NAME` printed, or use the agent's secret URL.",
}
QUERY_CREDENTIALS = {
    "error": "unauthorized",
    "message": "credentials in the URL query are refused (they end up in logs). "
    "Send 'Authorization: Bearer <token>' or use the agent's secret URL path.",
}


def unauthorized(message: dict = UNAUTHORIZED, *, resource_metadata: str | None = None,
                 invalid_token: bool = False) -> JSONResponse:
    """401 with RFC 6750's challenge; with OAuth on it names the protected-resource metadata (RFC 9728), and
    `error="invalid_token"` says that the token presented did not hold."""
    challenge = 'Bearer realm="persmem"'
    if resource_metadata:
        challenge += f', resource_metadata="{resource_metadata}"'
        if invalid_token:
            challenge += ', error="invalid_token"'
    return JSONResponse(message, status_code=401, headers={"WWW-Authenticate": challenge})


class OAuthResource:
    """What the middleware needs of the OAuth side: the token lookup, this server's resource (a token must have
    been issued for it), the path it guards and the metadata URL 401s name."""

    def __init__(self, store, *, resource: str, resource_path: str, resource_metadata: str,
                 open_paths: tuple[str, ...], client_auth_paths: tuple[str, ...]):
        self.store = store
        self.resource = resource
        self.resource_path = resource_path  # "/mcp": OAuth tokens are for the MCP endpoint only (their audience)
        self.resource_metadata = resource_metadata
        self.open_paths = open_paths
        self.client_auth_paths = client_auth_paths

    def agent_for(self, token: str) -> str | None:
        """The agent `token` acts as; None also when oauth.json cannot be read (logged: agent tokens still work)."""
        try:
            return self.store.agent_for_access_token(token, self.resource)
        except UserError as exc:
            log.error("OAuth token refused: %s", exc)
            return None

    def grant_of(self, token: str):
        try:
            return self.store.access_grant(token)
        except UserError:
            return None

    def guards(self, path: str) -> bool:
        return path == self.resource_path or path.startswith(self.resource_path + "/")


def loggable_path(path: str) -> str:
    """`path` as it may appear in a log: every segment that could hold a secret path (32+ characters, in
    any encoding or position: `/x/../S/mcp`, `//S/mcp`, `/mcp/S`) is `<secret>`, characters outside
    printable ASCII are percent-encoded (no forged log lines), and the whole is cut to a readable length."""
    segments = ("<secret>" if len(s) >= SECRET_SEGMENT_CHARS else s for s in path.split("/"))
    shown = "".join(c if "!" <= c <= "~" else quote(c, safe="") for c in "/".join(segments))
    return shown if len(shown) <= LOGGED_PATH_CHARS else shown[:LOGGED_PATH_CHARS] + "..."


def client_address(scope: Scope) -> str:
    """The caller's address (uvicorn puts the proxy's X-Forwarded-For there when the proxy is trusted)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class AgentAuthMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        agents: AgentStore,
        security: TransportSecuritySettings,
        anonymous_agent: Callable[[], str | None],
        failures: AuthFailures,
        open_prefixes: tuple[str, ...] = ("/healthz",),
        open_paths: tuple[str, ...] = (),
        oauth: OAuthResource | None = None,
    ):
        self.app = app
        self.agents = agents
        self.security = TransportSecurityMiddleware(security)
        self.anonymous_agent = anonymous_agent
        self.open_prefixes = open_prefixes
        self.open_paths = open_paths  # answered without credentials, matched exactly (`/`: a redirect to a page)
        self.failures = failures
        self.oauth = oauth
        if oauth is not None:
            self.open_paths = open_paths + oauth.open_paths

    def _unauthorized(self, message: dict = UNAUTHORIZED, *, invalid_token: bool = False) -> JSONResponse:
        return unauthorized(message, resource_metadata=self.oauth.resource_metadata if self.oauth else None,
                            invalid_token=invalid_token)

    def _token_check(self, token: str, path: str) -> Callable[[], str | None]:
        """The check that `token` still names an agent: an OAuth access token (on the path it was issued
        for), or an agent's own token."""
        oauth = self.oauth
        if oauth is not None and token.startswith(ACCESS_PREFIX):
            if not oauth.guards(path):
                return lambda: None
            return lambda: oauth.agent_for(token)
        return lambda: self.agents.agent_for_token(token)

    def _is_open(self, path: str) -> bool:
        return path in self.open_paths or any(path == p or path.startswith(p + "/") for p in self.open_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        shown_path = loggable_path(scope["path"])
        rejected = await self.security.validate_request(Request(scope), is_post=False)
        if rejected is not None:
            await self._respond(rejected, scope, receive, send, shown_path)
            return

        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"))
        if any(name.lower() in QUERY_SECRET_NAMES for name, _ in query):
            await self._refuse(self._unauthorized(QUERY_CREDENTIALS), scope, receive, send, shown_path)
            return

        # Each credential the request presents, as a check that it still names the agent.
        checks: list[Callable[[], str | None]] = []
        first, sep, rest = scope["path"].lstrip("/").partition("/")
        if len(first) >= SECRET_SEGMENT_CHARS:
            path_agent = self.agents.agent_for_path_secret(first)
            if path_agent is None and self.agents.has_credentials() and not self._is_open(scope["path"]):
                await self._refuse(self._unauthorized(), scope, receive, send, shown_path)  # a guessed secret path
                return
            if path_agent is not None:
                checks.append(lambda: self.agents.agent_for_path_secret(first))
                scope["path"] = "/" + rest if sep else "/"
                scope["raw_path"] = scope["path"].encode()
        header = Request(scope).headers.get("authorization")
        if self.oauth is not None and scope["path"] in self.oauth.client_auth_paths:
            header = None  # the endpoint authenticates its client itself (HTTP Basic client secrets)
        oauth_token: str | None = None
        if header is not None:
            scheme, _, token = header.partition(" ")
            token = token.strip()
            check = self._token_check(token, scope["path"]) if scheme.lower() == "bearer" else None
            if check is None or check() is None:
                await self._refuse(self._unauthorized(invalid_token=True), scope, receive, send, shown_path)
                return
            checks.append(check)
            if token.startswith(ACCESS_PREFIX) and self.oauth is not None:
                oauth_token = token

        agents = {check() for check in checks}
        if len(agents) > 1:  # a token and a secret path of two different agents
            await self._refuse(self._unauthorized(invalid_token=True), scope, receive, send, shown_path)
            return
        agent = agents.pop() if agents else None
        if agent is None and not self._is_open(scope["path"]):
            agent = self.anonymous_agent()
            if agent is None:
                await self._respond(self._unauthorized(), scope, receive, send, shown_path)
                return
            checks.append(self.anonymous_agent)
        if agent is None:
            await self._respond(self.app, scope, receive, send, shown_path)
            return
        self.agents.seen(agent)
        scope[AGENT_SCOPE_KEY] = agent
        scope["user"] = AuthenticatedUser(self._principal(agent, oauth_token))

        def still_valid() -> bool:
            return all(check() == agent for check in checks)

        await self._respond(self.app, scope, receive, send, shown_path, agent, still_valid)

    def _principal(self, agent: str, oauth_token: str | None) -> AccessToken:
        """Who the MCP SDK binds a session to: the agent; for an OAuth call, the OAuth client acting as the
        agent (subject), so a session is never shared between a client and the agent's own token."""
        grant = self.oauth.grant_of(oauth_token) if oauth_token and self.oauth else None
        if grant is None:
            return AccessToken(token="", client_id=agent, scopes=[])
        return AccessToken(token="", client_id=grant.client_id, scopes=list(grant.scopes), subject=agent,
                           resource=grant.resource)

    async def _refuse(self, response: ASGIApp, scope: Scope, receive: Receive, send: Send, shown_path: str) -> None:
        """A credential that does not hold: log it for fail2ban and answer after the address's delay."""
        await anyio.sleep(self.failures.failed(client_address(scope)))
        await self._respond(response, scope, receive, send, shown_path)

    async def _respond(
        self,
        app: ASGIApp,
        scope: Scope,
        receive: Receive,
        send: Send,
        shown_path: str,
        agent: str | None = None,
        still_valid: Callable[[], bool] | None = None,
    ) -> None:
        status = {"code": 0}

        async def send_and_note(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if still_valid is None:
                await app(scope, receive, send_and_note)
            else:
                await self._while_credential_holds(app, scope, receive, send_and_note, still_valid)
        finally:
            log.info("%s %s %s agent=%s", scope.get("method", "WS"), shown_path, status["code"], agent or "-")

    async def _while_credential_holds(
        self, app: ASGIApp, scope: Scope, receive: Receive, send: Send, still_valid: Callable[[], bool]
    ) -> None:
        """Run `app` while the credential holds: it is checked before every message sent and every
        CREDENTIAL_CHECK_SECONDS; once it fails the app is cancelled, nothing more is sent, and the
        answer ends (401 if it had not started, the end of the stream if it had)."""
        state = {"revoked": False, "started": False, "complete": False}
        cancel = anyio.CancelScope()

        def revoke_if_invalid() -> bool:
            if not state["revoked"] and not still_valid():
                state["revoked"] = True
                cancel.cancel()
            return state["revoked"]

        async def guarded_send(message: Message) -> None:
            if revoke_if_invalid():
                return  # dropped: the credential no longer names this agent
            state["started"] = state["started"] or message["type"] == "http.response.start"
            state["complete"] = message["type"] == "http.response.body" and not message.get("more_body", False)
            await send(message)

        loop = asyncio.get_running_loop()
        timer: asyncio.TimerHandle | None = None

        def periodic_check() -> None:
            nonlocal timer
            if not revoke_if_invalid():
                timer = loop.call_later(CREDENTIAL_CHECK_SECONDS, periodic_check)

        timer = loop.call_later(CREDENTIAL_CHECK_SECONDS, periodic_check)
        try:
            with cancel:
                await app(scope, receive, guarded_send)
        finally:
            timer.cancel()
        if state["revoked"] and scope["type"] == "http" and not state["complete"]:
            if state["started"]:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            else:
                await self._unauthorized(invalid_token=True)(scope, receive, send)

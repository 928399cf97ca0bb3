"""Serving the host's tools over MCP Streamable HTTP (stdio sessions: `persmem_core.transport.stdio_bridge`).

The MCP endpoint is `/mcp` (and `/<secret>/mcp` for agents with a secret
path); plugins mount their own HTTP apps beside it through `register_routes`;
`/healthz` answers without auth and reveals nothing. Plugins' `startup` runs
before the first request is accepted and `shutdown` after the last. With OAuth
on (`oauth_state`), the authorization server's endpoints are served beside
/mcp (persmem_core/auth/oauth/routes.py) and /mcp accepts its access tokens.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from urllib.parse import urlsplit

from persmem_core import __version__
from persmem_core.errors import UserError
from persmem_core.host import Host
from persmem_core.net.addresses import is_loopback

log = logging.getLogger("persmem.server")

def allowed_hosts_and_origins(host: Host, bind_host: str) -> tuple[list[str], list[str]]:
    server = host.config.server
    hosts = ["127.0.0.1", "localhost", "[::1]", "127.0.0.1:*", "localhost:*", "[::1]:*"]
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"]
    if bind_host not in ("0.0.0.0", "::", ""):
        shown = f"[{bind_host}]" if ":" in bind_host else bind_host
        hosts += [shown, f"{shown}:*"]
    for extra in server.allowed_hosts:
        hosts += [extra, f"{extra}:*"] if ":" not in extra else [extra]
    origins += list(server.allowed_origins)
    if server.public_url:
        parts = urlsplit(server.public_url)
        hosts += [parts.netloc, parts.hostname or parts.netloc]
        origins.append(f"{parts.scheme}://{parts.netloc}")
    return hosts, origins


def check_bind_allowed(host: Host, bind_host: str) -> None:
    if not is_loopback(bind_host) and not host.agents.has_credentials():
        raise UserError(
            f"refusing to listen on {bind_host!r} with no authentication: no agent has credentials. "
            "Run `persmem agent add NAME` first, or bind 127.0.0.1."
        )


def oauth_state(host: Host, bind_host: str, port: int) -> tuple[str | None, str]:
    """(the OAuth issuer, or None when OAuth is off; the startup line saying which, and why)."""
    from persmem_core.auth.oauth.routes import oauth_base_url

    if not host.section("oauth").enabled:
        return None, "oauth: off ([oauth] enabled = false): remote clients use bearer tokens or secret paths"
    public = urlsplit(host.config.server.public_url)
    if public.path.strip("/"):
        return None, (f"oauth: off: [server] public_url {host.config.server.public_url!r} has a path, and OAuth "
                      "clients look for the sign-in metadata at the root of the host; serve persmem at the root of "
                      "its own host name (https://mcp.example.com) to use OAuth")
    if public.scheme == "http" and not is_loopback(public.hostname or ""):
        return None, (f"oauth: off: [server] public_url {host.config.server.public_url!r} is plain http, and the "
                      "operator passphrase and tokens must not cross a network unencrypted; put persmem behind a "
                      "TLS proxy and set public_url to its https URL")
    issuer = oauth_base_url(host, bind_host, port)
    if issuer is None:
        return None, (f"oauth: off: listening on {bind_host} without [server] public_url, so there is no address "
                      "to sign in at; set [server] public_url to the https URL clients use (claude.ai connectors)")
    lines = [f"oauth: remote clients (claude.ai connectors) sign in at {issuer} and act as the agent the operator "
             f"approves; connector URL {issuer}/mcp"]
    try:
        ready = host.oauth.has_operator_credential()
    except UserError as exc:  # a damaged oauth.json: OAuth sign-ins fail with this message, the rest serves
        return issuer, "; ".join(lines + [str(exc)])
    if not ready:
        lines.append("nobody can approve yet: set the operator passphrase with `persmem oauth password`, or print a "
                     "one-time code with `persmem oauth approve-code`")
    return issuer, "; ".join(lines)


def build_http_app(host: Host, *, bind_host: str, port: int | None = None, local_socket=None, card=None,
                   route_specs=None):
    """The ASGI app `persmem serve --transport http` runs (also used by tests and benchmarks). With
    `local_socket` (a listening unix socket, `ownership.bind_private_socket`), the same tools are also served
    there to local clients (stdio sessions), for as long as the app runs. `port` (default [server] port) is the
    one clients reach on a loopback bind: the OAuth issuer's, when no public_url is set."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import TransportSecuritySettings
    from starlette.applications import Starlette

    from persmem_core.auth.middleware import AgentAuthMiddleware
    from persmem_core.transport.http_headers import SecurityHeadersMiddleware
    from persmem_core.transport.http_limits import JsonRpcBodyLimit
    from persmem_core.transport.tools import build_mcp_server

    server_cfg = host.config.server
    hosts, origins = allowed_hosts_and_origins(host, bind_host)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    mcp_server = build_mcp_server(host)
    sessions = StreamableHTTPSessionManager(
        app=mcp_server._lowlevel_server,
        security_settings=security,
        max_request_body_size=server_cfg.max_body_bytes,
        json_response=server_cfg.json_response,
        stateless=server_cfg.stateless,
    )
    route_specs = host.collect_routes() if route_specs is None else route_specs
    routes = _http_routes(sessions, route_specs)
    oauth_endpoints, oauth = _oauth_resource(host, bind_host, server_cfg.port if port is None else port)
    routes = oauth_endpoints + routes
    lifespan = _lifespan(host, sessions, mcp_server, local_socket, card, route_specs)

    app = Starlette(routes=routes, lifespan=lifespan)
    limited = JsonRpcBodyLimit(app, server_cfg.max_body_bytes)
    open_prefixes = ("/healthz",) + tuple(spec.prefix for spec in route_specs if spec.auth == "none")
    authenticated = AgentAuthMiddleware(
        limited, agents=host.agents, security=security, anonymous_agent=_anonymous_agent(host, bind_host),
        failures=host.auth_failures, open_prefixes=open_prefixes, open_paths=("/", "/favicon.ico"), oauth=oauth,
    )
    return SecurityHeadersMiddleware(authenticated)  # outermost: refusals and 404s get the headers too


def _http_routes(sessions, route_specs) -> list:
    """/mcp (served by the MCP session manager), /healthz, / (to the first page a plugin serves), /favicon.ico, and
    every plugin's app mounted at its prefix."""
    from starlette.responses import JSONResponse, RedirectResponse, Response
    from starlette.routing import Mount, Route

    class MCPEndpoint:
        async def __call__(self, scope, receive, send):
            await sessions.handle_request(scope, receive, send)

    async def healthz(request):
        return JSONResponse({"status": "ok"})

    pages = [spec for spec in route_specs if spec.title]

    async def root(request):
        """A browser that opens the server's address lands on its first page (the dashboard)."""
        if pages:
            return RedirectResponse(pages[0].prefix + "/", status_code=302)
        return JSONResponse({"service": "persmem", "mcp": "/mcp"})

    async def favicon(request):  # pages declare their own icon; this only spares browsers a 401
        return Response(status_code=404)

    routes = [Route("/mcp", endpoint=MCPEndpoint()), Route("/healthz", endpoint=healthz),
              Route("/", endpoint=root), Route("/favicon.ico", endpoint=favicon)]
    return routes + [Mount(spec.prefix, app=spec.app) for spec in route_specs]


def _oauth_resource(host: Host, bind_host: str, port: int) -> tuple[list, object | None]:
    """(the authorization server's endpoints, what the auth middleware checks OAuth access tokens with), or
    ([], None) when OAuth is off (`oauth_state`)."""
    from persmem_core.auth.middleware import OAuthResource

    issuer, _ = oauth_state(host, bind_host, port)
    if issuer is None:
        return [], None
    from persmem_core.auth.oauth import routes as oauth_routes

    resource = issuer + oauth_routes.RESOURCE_PATH
    endpoints, _provider = oauth_routes.build_oauth_routes(host, issuer, resource)
    oauth = OAuthResource(
        host.oauth, resource=resource, resource_path=oauth_routes.RESOURCE_PATH,
        resource_metadata=oauth_routes.resource_metadata_url(issuer),
        open_paths=oauth_routes.oauth_paths(), client_auth_paths=oauth_routes.client_auth_paths(),
    )
    return endpoints, oauth


def _lifespan(host: Host, sessions, mcp_server, local_socket, card, route_specs):
    """The app's lifespan: the MCP sessions run, and with `local_socket` the same tools are served there, until the
    app stops; then the plugins shut down."""
    from persmem_core.transport.local_server import LocalListener, build_local_app
    from persmem_core.transport.owner_card import OwnerCard

    @contextlib.asynccontextmanager
    async def lifespan(app):  # the plugins were started before the port opened (serve_http)
        import anyio
        import anyio.to_thread

        async with sessions.run(), anyio.create_task_group() as tg:
            listener = None
            if local_socket is not None:
                local_app = build_local_app(host, mcp_server, card or OwnerCard(role="http"), route_specs=route_specs)
                listener = LocalListener(local_app, local_socket)
                await tg.start(listener.run)
            try:
                yield
            finally:
                if listener is not None:
                    await listener.stop()
                await anyio.to_thread.run_sync(host.shutdown)

    return lifespan


def _anonymous_agent(host: Host, bind_host: str):
    """Who a request without credentials acts as: [server] default_agent, while the server listens on loopback only
    (no public_url, no allowed_hosts) and no agent has credentials; else nobody (None)."""
    server_cfg = host.config.server
    anonymous_ok = (
        is_loopback(bind_host) and not server_cfg.public_url and not server_cfg.allowed_hosts
    )

    def anonymous_agent() -> str | None:
        if anonymous_ok and not host.agents.has_credentials():
            return server_cfg.default_agent
        return None

    return anonymous_agent


def configure_logging(level: str) -> None:
    # Logs go to stderr: over stdio, stdout carries the protocol.
    logging.basicConfig(
        stream=sys.stderr, level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    for chatty in ("httpx2", "mcp.server.streamable_http"):  # a line per forwarded stdio message otherwise
        logging.getLogger(chatty).setLevel(logging.WARNING)


def bind_port(bind_host: str, port: int):
    """The listening TCP socket, opened before any plugin starts: a port in use is one clear line."""
    import socket

    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind_host, port))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {bind_host}:{port}: {exc.strerror}. Another program uses that port: "
                        "choose another with --port or [server] port.") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def startup_lines(host: Host, url: str, local: str, route_specs, oauth_line: str = "") -> list[str]:
    """What the operator needs to know once the server runs: where to connect, and who gets in."""
    server_cfg = host.config.server
    pages = ", ".join(f"{spec.title} {url}{spec.prefix}/" for spec in route_specs if spec.title)
    lines = [f"persmem {__version__} serving MCP on {url}/mcp" + (f"; {pages}" if pages else "")
             + f"; local clients (stdio, CLI) through {local}"]
    if host.agents.has_credentials():
        lines.append(f"auth: bearer token or secret path of one of {len(host.agents.names())} agent(s) "
                     "(`persmem agent list`)")
    else:
        lines.append(f"auth: no agent has credentials yet, so loopback callers are served as agent "
                     f"{server_cfg.default_agent!r}; `persmem agent add NAME` makes every client need a token")
    if oauth_line:
        lines.append(oauth_line)
    return lines


def serve_http(host: Host, *, bind_host: str, port: int) -> None:
    from persmem_core.paths import socket_path
    from persmem_core.transport.owner_card import OwnerCard
    from persmem_core.transport.ownership import OwnerLock, bind_private_socket
    from persmem_core.transport.takeover import take_home

    server_cfg = host.config.server
    check_bind_allowed(host, bind_host)
    host.sealer  # a missing or wrong key stops here, before this process takes the home (and writes its pid)
    lock = OwnerLock(host.home)
    take_home(host, lock)  # this process owns the home from here on (or a clear line says who does)
    try:
        tcp = bind_port(bind_host, port)
        port = tcp.getsockname()[1]
        shown = f"[{bind_host}]" if ":" in bind_host else bind_host
        url = server_cfg.public_url.rstrip("/") or f"http://{shown}:{port}"
        local = bind_private_socket(socket_path(host.home))
        # Before the web and MCP libraries are imported (a second or two): plugins start meanwhile (the memory
        # store loads in the background on the other core). A plugin that cannot start stops the server with one
        # clear line, before anything is served.
        host.startup()
        try:
            import uvicorn
            from uvicorn.protocols.http.auto import AutoHTTPProtocol

            from persmem_core.transport.http_deadlines import with_read_deadlines

            route_specs = host.collect_routes()  # once: each call builds the plugins' apps (the dashboard's) anew
            app = build_http_app(host, bind_host=bind_host, port=port, local_socket=local, route_specs=route_specs,
                                 card=OwnerCard(role="http", mcp_url=f"{url}/mcp"))
            config = uvicorn.Config(
                app,
                # uvicorn's protocol (httptools, else h11) with deadlines for headers and bodies (slowloris)
                http=with_read_deadlines(
                    AutoHTTPProtocol,
                    header=server_cfg.header_timeout_seconds,
                    body_idle=server_cfg.body_idle_timeout_seconds,
                    body=server_cfg.body_timeout_seconds,
                ),
                log_level=server_cfg.log_level,
                access_log=False,  # our middleware logs requests with secret paths redacted
                lifespan="on",
                server_header=False,
                timeout_graceful_shutdown=3,  # open event streams (dashboard, /amq/events) must not hold a stop
            )
            host.serving_addresses.add((bind_host, port))
            _, oauth_line = oauth_state(host, bind_host, port)
            for line in startup_lines(host, url, str(socket_path(host.home)), route_specs, oauth_line):
                log.info("%s", line)
            stopping_server(config).run(sockets=[tcp])
        finally:
            host.shutdown()  # if the lifespan never ran; otherwise it already did, and this is a no-op
            socket_path(host.home).unlink(missing_ok=True)
    finally:
        lock.release()


def stopping_server(config):
    """uvicorn's Server, except that SIGINT or SIGTERM is a clean stop (exit 0), not re-raised afterwards."""
    import signal

    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            handled = (signal.SIGINT, signal.SIGTERM)
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    return Server(config)

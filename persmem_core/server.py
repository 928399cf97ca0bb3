"""Serving the host's tools over MCP: stdio and Streamable HTTP.

The MCP endpoint is `/mcp` (and `/<secret>/mcp` for agents with a secret
path); plugins mount their own HTTP apps beside it through `register_routes`;
`/healthz` answers without auth and reveals nothing. Plugins' `startup` runs
before the first request is accepted and `shutdown` after the last.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from typing import Literal
from urllib.parse import urlsplit

from persmem_core import __version__
from persmem_core.errors import UserError
from persmem_core.host import Host
from persmem_core.netaddr import is_loopback

log = logging.getLogger("persmem.server")

INSTRUCTIONS = (
    "persmem gives you long-term memory, a mailbox to talk with other named agents, and workspace tools. "
    "Your agent identity comes from your credentials, not from tool arguments; persmem_whoami shows it."
)


def build_mcp_server(host: Host, *, transport: Literal["stdio", "http"], stdio_agent: str | None = None):
    from mcp.server.mcpserver import MCPServer

    from persmem_core.tools import CallerResolver, CallLimits, build_tool

    resolver, limits = CallerResolver(host, transport, stdio_agent), CallLimits()
    tools = [build_tool(spec, resolver, limits) for spec in host.collect_tools()]
    return MCPServer("persmem", version=__version__, instructions=INSTRUCTIONS, tools=tools)


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


def build_http_app(host: Host, *, bind_host: str):
    """The ASGI app `persmem serve --transport http` runs (also used by tests and benchmarks)."""
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from mcp.server.transport_security import RequestBodyLimitMiddleware, TransportSecuritySettings
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route

    from persmem_core.auth import AgentAuthMiddleware
    from persmem_core.http_headers import SecurityHeadersMiddleware

    server_cfg = host.config.server
    hosts, origins = allowed_hosts_and_origins(host, bind_host)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    mcp_server = build_mcp_server(host, transport="http")
    sessions = StreamableHTTPSessionManager(
        app=mcp_server._lowlevel_server,
        security_settings=security,
        max_request_body_size=server_cfg.max_body_bytes,
        json_response=server_cfg.json_response,
    )

    class MCPEndpoint:
        async def __call__(self, scope, receive, send):
            await sessions.handle_request(scope, receive, send)

    async def healthz(request):
        return JSONResponse({"status": "ok"})

    route_specs = host.collect_routes()
    routes = [Route("/mcp", endpoint=MCPEndpoint()), Route("/healthz", endpoint=healthz)]
    routes += [Mount(spec.prefix, app=spec.app) for spec in route_specs]

    @contextlib.asynccontextmanager
    async def lifespan(app):  # the plugins were started before the port opened (serve_http)
        import anyio.to_thread

        async with sessions.run():
            try:
                yield
            finally:
                await anyio.to_thread.run_sync(host.shutdown)  # here: uvicorn re-raises SIGTERM after the app

    anonymous_ok = (
        is_loopback(bind_host) and not server_cfg.public_url and not server_cfg.allowed_hosts
    )

    def anonymous_agent() -> str | None:
        if anonymous_ok and not host.agents.has_credentials():
            return server_cfg.default_agent
        return None

    app = Starlette(routes=routes, lifespan=lifespan)
    limited = RequestBodyLimitMiddleware(app, server_cfg.max_body_bytes)
    open_prefixes = ("/healthz",) + tuple(spec.prefix for spec in route_specs if spec.auth == "none")
    authenticated = AgentAuthMiddleware(
        limited, agents=host.agents, security=security, anonymous_agent=anonymous_agent,
        failures=host.auth_failures, open_prefixes=open_prefixes,
    )
    return SecurityHeadersMiddleware(authenticated)  # outermost: refusals and 404s get the headers too


def configure_logging(level: str) -> None:
    # Logs go to stderr: over stdio, stdout carries the protocol.
    logging.basicConfig(
        stream=sys.stderr, level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def serve_http(host: Host, *, bind_host: str, port: int) -> None:
    import uvicorn
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    from persmem_core.http_deadlines import with_read_deadlines

    server_cfg = host.config.server
    check_bind_allowed(host, bind_host)
    app = build_http_app(host, bind_host=bind_host)
    log.info("persmem %s serving MCP on http://%s:%s/mcp", __version__, bind_host, port)
    config = uvicorn.Config(
        app,
        host=bind_host,
        port=port,
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
    host.startup()  # before the port opens: a plugin that cannot start stops the server with one clear line
    try:
        uvicorn.Server(config).run()
    finally:
        host.shutdown()  # if the lifespan never ran (the port was taken); otherwise it already did, and this is a no-op


def serve_stdio(host: Host, *, agent: str) -> None:
    import anyio

    mcp_server = build_mcp_server(host, transport="stdio", stdio_agent=agent)
    host.startup()
    try:
        anyio.run(mcp_server.run_stdio_async)
    finally:
        host.shutdown()

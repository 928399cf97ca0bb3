"""`persmem dashboard`: serve the dashboard alone (without MCP over TCP), for when `persmem serve` is not running.

This process opens the plugins' stores, so it owns the home as a server does: beside a running `persmem serve`
it refuses in one line naming it (that one serves the dashboard already), and stdio sessions started while it
runs join it through the home's local socket."""

from __future__ import annotations

import click


@click.command()
@click.option("--host", "bind", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8766, show_default=True, type=int)
def dashboard(bind: str, port: int) -> None:
    """Serve only the dashboard (http://HOST:PORT/), opening the plugins' stores in this process."""
    import uvicorn

    from persmem_core.sdk import get_host
    from persmem_core.sdk import OwnerCard
    from persmem_core.sdk import stopping_server
    from persmem_core.sdk import holding_home

    from .app import build_dashboard

    host = get_host()
    if bind not in ("127.0.0.1", "::1", "localhost") and not host.agents.names():
        raise click.ClickException("refusing to listen beyond loopback before any agent exists (persmem agent add).")

    app = build_dashboard(host, "")
    with holding_home(host, OwnerCard(role="dashboard", mcp_url="")) as open_socket:
        host.startup()
        try:
            open_socket()
            config = uvicorn.Config(app, host=bind, port=port, log_level="warning", timeout_graceful_shutdown=3)
            stopping_server(config).run()  # Ctrl-C is a clean stop, exit 0
        finally:
            host.shutdown()

"""`persmem dashboard`: serve the dashboard alone (without MCP), for when `persmem serve` is not running.

Plugins' stores are opened by this process, so do not run it beside a server on the same data."""

from __future__ import annotations

import click


@click.command()
@click.option("--host", "bind", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8766, show_default=True, type=int)
def dashboard(bind: str, port: int) -> None:
    """Serve only the dashboard (http://HOST:PORT/), opening the plugins' stores in this process."""
    import uvicorn

    from persmem_core.cli import get_host

    from .app import build_dashboard

    host = get_host()
    if bind not in ("127.0.0.1", "::1", "localhost") and not host.agents.names():
        raise click.ClickException("refusing to listen beyond loopback before any agent exists (persmem agent add).")
    app = build_dashboard(host, "")
    host.startup()
    try:
        uvicorn.run(app, host=bind, port=port, log_level="warning", timeout_graceful_shutdown=3)
    finally:
        host.shutdown()

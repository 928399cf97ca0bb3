"""`persmem serve`: run the MCP server."""

from __future__ import annotations

import click


@click.command()
@click.option("--transport", type=click.Choice(["http", "stdio"]), help="Default: [server] transport (http).")
@click.option("--host", "bind_host", help="Address to bind (HTTP). Default: [server] host (127.0.0.1).")
@click.option("--port", type=int, help="Port (HTTP). Default: [server] port (8765).")
@click.option("--agent", envvar="PERSMEM_AGENT", help="Agent name for stdio (env PERSMEM_AGENT).")
def serve(transport: str | None, bind_host: str | None, port: int | None, agent: str | None) -> None:
    """Serve every plugin's tools over MCP (Streamable HTTP at /mcp, or stdio)."""
    from persmem_core.transport import server
    from persmem_core.cli.commands import get_host

    host = get_host()
    cfg = host.config.server
    server.configure_logging(cfg.log_level)
    for warning in host.warnings:
        click.echo(f"warning: {warning}", err=True)
    for info in host.plugins:
        if info.error:
            click.echo(f"warning: plugin {info.name} not loaded: {info.error}", err=True)
    if (transport or cfg.transport) == "stdio":
        from persmem_core.transport.local_server import served_agent
        from persmem_core.transport.stdio_bridge import serve_stdio

        serve_stdio(host, agent=served_agent(host, agent))  # shares the home with every other client
    else:
        server.serve_http(host, bind_host=bind_host or cfg.host, port=cfg.port if port is None else port)

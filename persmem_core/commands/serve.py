"""`persmem serve`: run the MCP server."""

from __future__ import annotations

import click

from persmem_core.agents import check_name
from persmem_core.errors import UserError


@click.command()
@click.option("--transport", type=click.Choice(["http", "stdio"]), help="Default: [server] transport (http).")
@click.option("--host", "bind_host", help="Address to bind (HTTP). Default: [server] host (127.0.0.1).")
@click.option("--port", type=int, help="Port (HTTP). Default: [server] port (8765).")
@click.option("--agent", envvar="PERSMEM_AGENT", help="Agent name for stdio (env PERSMEM_AGENT).")
def serve(transport: str | None, bind_host: str | None, port: int | None, agent: str | None) -> None:
    """Serve every plugin's tools over MCP (Streamable HTTP at /mcp, or stdio)."""
    from persmem_core import server
    from persmem_core.commands import get_host

    host = get_host()
    cfg = host.config.server
    server.configure_logging(cfg.log_level)
    for warning in host.warnings:
        click.echo(f"warning: {warning}", err=True)
    for info in host.plugins:
        if info.error:
            click.echo(f"warning: plugin {info.name} not loaded: {info.error}", err=True)
    if (transport or cfg.transport) == "stdio":
        server.serve_stdio(host, agent=stdio_agent(host, agent))
    else:
        server.serve_http(host, bind_host=bind_host or cfg.host, port=cfg.port if port is None else port)


def stdio_agent(host, agent: str | None) -> str:
    """Whom stdio speaks for. `--agent` (or PERSMEM_AGENT) must name an agent that exists and is not
    revoked: a typo must not invent a new identity, nor a revoked agent keep speaking. Without it,
    [server] default_agent, which needs no registry entry (a fresh home has no agents)."""
    default = host.config.server.default_agent
    name = check_name(agent or default)
    record = host.agents.agents().get(name)
    if record is not None and record.revoked is not None:
        raise UserError(
            f"agent {name!r} was revoked ({record.revoked}); it cannot be served. "
            f"`persmem agent add {name}` gives it new credentials, or choose another agent with --agent."
        )
    if record is None and name != default:
        raise UserError(
            f"no agent named {name!r}. Create it with `persmem agent add {name}`, pick one of "
            f"`persmem agent list`, or leave out --agent to serve as {default!r}."
        )
    return name

"""`persmem agent add|token|secret-path|list|revoke`: named agents and their credentials."""

from __future__ import annotations

import click

from persmem_core.invocation import persmem_line


@click.group()
def agent() -> None:
    """Manage agents (kite, wren, ...) and their tokens / secret URL paths."""


def _show(issued, what: str) -> None:
    from persmem_core.cli.commands import get_host
    from persmem_core.cli.commands.connect import base_url

    click.echo(f"agent {issued.name}: {what} (shown once; only hashes are stored)")
    if issued.token:
        click.echo(f"token: {issued.token}")
    if issued.secret_path:
        click.echo(f"secret path: /{issued.secret_path}/mcp")
        click.echo(f"claude.ai connector URL: {base_url(None, get_host().config.server)}/{issued.secret_path}/mcp")
    click.echo(f"Next: `{persmem_line('connect', issued.name)}` prints client setup.")


@agent.command("add")
@click.argument("name")
@click.option("--secret-path", is_flag=True, help="Also issue a secret URL path (for clients that cannot send headers).")
@click.option("--no-token", is_flag=True, help="Issue only a secret path, no bearer token.")
@click.option("--rotate", is_flag=True, help="Replace ALL of an existing agent's credentials (the old ones stop "
              "working). To add or replace only one, use `persmem agent token` or `persmem agent secret-path`.")
def add(name: str, secret_path: bool, no_token: bool, rotate: bool) -> None:
    """Create agent NAME and print its credentials. They are shown only this once."""
    from persmem_core.cli.commands import get_host

    host = get_host()
    issued = host.agents.add(name, token=not no_token, secret_path=secret_path or no_token, replace=rotate)
    _show(issued, "credentials issued")


@agent.command("token")
@click.argument("name")
def token(name: str) -> None:
    """Issue a new bearer token for existing agent NAME; the old token stops working, its secret path keeps
    working."""
    from persmem_core.cli.commands import get_host

    _show(get_host().agents.renew(name, token=True), "new token issued, the old one no longer works")


@agent.command("secret-path")
@click.argument("name")
def secret_path_(name: str) -> None:
    """Issue a secret URL path (for claude.ai, which cannot send a token) for existing agent NAME; an older
    secret path stops working, its token keeps working."""
    from persmem_core.cli.commands import get_host

    _show(get_host().agents.renew(name, secret_path=True), "secret path issued (its token keeps working)")


@agent.command("list")
def list_() -> None:
    """List agents: name, created (UTC), which credentials they hold, revoked or not."""
    from persmem_core.cli.commands import get_host
    from persmem_core.timefmt import iso_utc

    agents = get_host().agents.agents()
    if not agents:
        click.echo(f"no agents yet: `{persmem_line('agent', 'add', 'NAME')}`")
    for name, record in sorted(agents.items()):
        creds = [kind for kind, value in (("token", record.token_sha256), ("secret-path", record.path_sha256)) if value]
        state = f"revoked {iso_utc(record.revoked)}" if record.revoked else ", ".join(creds)
        click.echo(f"{name}\tcreated {iso_utc(record.created)}\t{state}")


@agent.command()
@click.argument("name")
def revoke(name: str) -> None:
    """Revoke NAME's credentials and end its OAuth grants; a running server refuses them at once."""
    from persmem_core.cli.commands import get_host

    host = get_host()
    host.agents.revoke(name)
    ended = host.oauth.revoke_agent(name)  # their tokens already fail (the agent is gone); this shows it in the list
    click.echo(f"agent {name}: credentials revoked, {len(ended)} OAuth grant(s) ended")

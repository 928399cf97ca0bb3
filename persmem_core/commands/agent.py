"""`persmem agent add|list|revoke`: named agents and their credentials."""

from __future__ import annotations

import click


@click.group()
def agent() -> None:
    """Manage agents (kite, wren, ...) and their tokens / secret URL paths."""


@agent.command("add")
@click.argument("name")
@click.option("--secret-path", is_flag=True, help="Also issue a secret URL path (for clients that cannot send headers).")
@click.option("--no-token", is_flag=True, help="Issue only a secret path, no bearer token.")
@click.option("--rotate", is_flag=True, help="Replace an existing agent's credentials (the old ones stop working).")
def add(name: str, secret_path: bool, no_token: bool, rotate: bool) -> None:
    """Create agent NAME and print its credentials. They are shown only this once."""
    from persmem_core.commands import get_host

    host = get_host()
    issued = host.agents.add(name, token=not no_token, secret_path=secret_path or no_token, replace=rotate)
    click.echo(f"agent {issued.name}: credentials issued (shown once; only hashes are stored)")
    if issued.token:
        click.echo(f"token: {issued.token}")
    if issued.secret_path:
        click.echo(f"secret path: /{issued.secret_path}/mcp")
    click.echo(f"Next: `persmem connect {issued.name}` prints client setup.")


@agent.command("list")
def list_() -> None:
    """List agents: name, created, which credentials they hold, revoked or not."""
    from persmem_core.commands import get_host

    agents = get_host().agents.agents()
    if not agents:
        click.echo("no agents yet: `persmem agent add NAME`")
    for name, record in sorted(agents.items()):
        creds = [kind for kind, value in (("token", record.token_sha256), ("secret-path", record.path_sha256)) if value]
        state = f"revoked {record.revoked}" if record.revoked else ", ".join(creds)
        click.echo(f"{name}\tcreated {record.created}\t{state}")


@agent.command()
@click.argument("name")
def revoke(name: str) -> None:
    """Revoke NAME's credentials; a running server refuses them at once."""
    from persmem_core.commands import get_host

    get_host().agents.revoke(name)
    click.echo(f"agent {name}: credentials revoked")

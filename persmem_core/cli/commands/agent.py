"""`persmem agent add|token|secret-path|tools|list|revoke`: named agents, their credentials and tool sets."""

from __future__ import annotations

import click

from persmem_core.invocation import persmem_line
from persmem_core.tool_costs import tool_sets_text


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
@click.option("--tools", "tool_sets", metavar="SETS", help="Tool sets its connections list, e.g. memory,mail,workspace "
              "(default: [tools] default_sets; `persmem agent tools NAME` changes them later).")
def add(name: str, secret_path: bool, no_token: bool, rotate: bool, tool_sets: str | None) -> None:
    """Create agent NAME and print its credentials. They are shown only this once."""
    from persmem_core.cli.commands import get_host
    from persmem_core.tool_sets import parse_sets

    host = get_host()
    sets = parse_sets(host, tool_sets) if tool_sets is not None else None
    issued = host.agents.add(name, token=not no_token, secret_path=secret_path or no_token, replace=rotate)
    if sets is not None:
        host.agents.set_tool_sets(name, sets)
    _show(issued, "credentials issued")
    if sets is not None:
        click.echo(tool_sets_text(host, name))


@agent.command("tools")
@click.argument("name")
@click.option("--add", "added", metavar="SETS", help="Sets to add, e.g. workspace,web.")
@click.option("--remove", "removed", metavar="SETS", help="Sets to take away.")
@click.option("--set", "replaced", metavar="SETS", help="Exactly these sets (all: every one).")
@click.option("--default", "to_default", is_flag=True, help="Back to [tools] default_sets.")
def tools_(name: str, added: str | None, removed: str | None, replaced: str | None, to_default: bool) -> None:
    """Show or change the tool sets agent NAME's connections list, and what they cost in tokens per session.
    A client lists the new tools after it reconnects."""
    from persmem_core.cli.commands import get_host
    from persmem_core.tool_sets import ALL_SETS, known_sets, parse_sets, sets_of

    host = get_host()
    if name not in host.agents.names():
        raise click.ClickException(f"no active agent named {name!r}; `{persmem_line('agent', 'list')}` shows them.")
    given = sum(x is not None for x in (added, removed, replaced)) + to_default
    if (replaced is not None or to_default) and given > 1:
        raise click.UsageError("--set and --default each replace the whole choice: give one of them alone.")
    if to_default:
        host.agents.set_tool_sets(name, None)
    elif replaced is not None:
        host.agents.set_tool_sets(name, parse_sets(host, replaced))
    elif added is not None or removed is not None:
        sets = sets_of(host, name) + (parse_sets(host, added) if added else [])
        gone = set(parse_sets(host, removed)) if removed else set()
        if gone and ALL_SETS in sets:  # taking one away from every set: the others, named
            sets = [s for s in sets if s != ALL_SETS] + known_sets(host)
        if ALL_SETS in gone:
            gone |= set(known_sets(host))
        host.agents.set_tool_sets(name, [s for s in dict.fromkeys(sets) if s not in gone])
    click.echo(tool_sets_text(host, name))


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

    from persmem_core.tool_sets import sets_of

    host = get_host()
    agents = host.agents.agents()
    if not agents:
        click.echo(f"no agents yet: `{persmem_line('agent', 'add', 'NAME')}`")
    for name, record in sorted(agents.items()):
        creds = [kind for kind, value in (("token", record.token_sha256), ("secret-path", record.path_sha256)) if value]
        state = f"revoked {iso_utc(record.revoked)}" if record.revoked else ", ".join(creds)
        sets = "" if record.revoked else "\ttools " + ",".join(sets_of(host, name))
        click.echo(f"{name}\tcreated {iso_utc(record.created)}\t{state}{sets}")


@agent.command()
@click.argument("name")
def revoke(name: str) -> None:
    """Revoke NAME's credentials and end its OAuth grants; a running server refuses them at once."""
    from persmem_core.cli.commands import get_host

    host = get_host()
    host.agents.revoke(name)
    ended = host.oauth.revoke_agent(name)  # their tokens already fail (the agent is gone); this shows it in the list
    click.echo(f"agent {name}: credentials revoked, {len(ended)} OAuth grant(s) ended")

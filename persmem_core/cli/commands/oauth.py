"""`persmem oauth clients|revoke|password|approve-code`: remote clients signed in with OAuth, and the operator's
credential that approves them on the consent page. Changes take effect in a running server at once."""

from __future__ import annotations

import secrets
import sys

import click

from persmem_core.invocation import persmem_line


@click.group()
def oauth() -> None:
    """OAuth clients (claude.ai custom connectors and other remote clients) and the operator credential.

    A remote client signs in through the consent page, where the operator (you) proves who they are with the
    passphrase `persmem oauth password` sets, or a one-time code from `persmem oauth approve-code`, and picks
    the agent the client acts as."""


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


@oauth.command("clients")
def clients() -> None:
    """List OAuth clients and their grants: client name, client id, agent, state (active, revoked and why,
    expired), created, last refreshed and grant id. Registered clients without a grant are listed too."""
    from persmem_core.cli.commands import get_host
    from persmem_core.auth.oauth.store import grant_state
    from persmem_core.text import printable
    from persmem_core.timefmt import iso_utc

    store = get_host().oauth
    grants, registered = store.grants(), store.clients()
    if not grants and not registered:
        click.echo("no OAuth clients yet: add this server's /mcp URL as a custom connector in claude.ai (or any "
                   "MCP client that signs in with OAuth) and approve it on the consent page.")
        return
    rows = [["CLIENT", "CLIENT ID", "AGENT", "STATE", "CREATED", "LAST REFRESHED", "GRANT"]]
    for grant in grants:
        state = grant_state(grant)
        shown = f"revoked ({grant.revoked_reason})" if state == "revoked" and grant.revoked_reason else state
        rows.append([printable(grant.client_name) or "-", printable(grant.client_id), grant.agent, shown,
                     iso_utc(grant.created), iso_utc(grant.last_refreshed), grant.grant_id])
    granted = {grant.client_id for grant in grants}
    for client in registered:
        if client.client_id not in granted:
            rows.append([printable(client.client_name) or "-", printable(client.client_id), "-", "no grant yet",
                         iso_utc(client.registered) if client.registered else "-", "-", "-"])
    for line in _table(rows):
        click.echo(line)
    click.echo(f"End a grant: `{persmem_line('oauth', 'revoke', 'GRANT')}` (a client id ends all of its grants).")


@oauth.command("revoke")
@click.argument("target")
def revoke(target: str) -> None:
    """End TARGET: a grant id (g_...) or a client id (then every grant of that client). Its tokens stop working
    at once; the client must be approved on the consent page again."""
    from persmem_core.cli.commands import get_host
    from persmem_core.text import printable

    for grant in get_host().oauth.revoke(target):
        click.echo(f"grant {grant.grant_id} ended: {printable(grant.client_name or grant.client_id)} acting as "
                   f"{grant.agent}")


@oauth.command("password")
@click.option("--generate", is_flag=True, help="Make a random passphrase and print it (once) instead of asking.")
def password(generate: bool) -> None:
    """Set the operator passphrase: typed on the consent page to approve a remote client. Asked twice with
    hidden input (read from standard input when it is not a terminal). Replaces the previous one."""
    from persmem_core.cli.commands import get_host

    store = get_host().oauth
    if generate:
        secret = secrets.token_urlsafe(18)
    elif sys.stdin.isatty():
        secret = click.prompt("Operator passphrase (at least 12 characters)", hide_input=True,
                              confirmation_prompt=True)
    else:
        secret = sys.stdin.readline().rstrip("\r\n")
    store.set_operator_password(secret)
    if generate:
        click.echo(f"operator passphrase: {secret}")
        click.echo("(shown once; only a scrypt hash is stored) Keep it in your password manager.")
    else:
        click.echo("operator passphrase set (only a scrypt hash is stored).")
    click.echo("The consent page accepts it from now on; a running server needs no restart.")


@oauth.command("approve-code")
@click.option("--minutes", type=click.IntRange(1, 1440), default=10, show_default=True,
              help="How long the code works.")
def approve_code(minutes: int) -> None:
    """Print a one-time approval code: typed on the consent page instead of the passphrase, it approves one
    remote client, once, within --minutes."""
    from persmem_core.cli.commands import get_host

    code = get_host().oauth.new_approval_code(minutes)
    click.echo(f"approval code: {code}")
    click.echo(f"Works once, for the next {minutes} minute(s), in the consent page's operator field.")

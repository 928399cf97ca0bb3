"""`persmem amq ...`: look at the mailboxes and send mail from the command line (for a human operator).

These work on the mail root directly, beside a running server: Maildir needs no lock. Each command opens
its own store (service.open_service) for its length; a server's store is in that server's process.
"""

from __future__ import annotations

import json
import sys

import click


def _store():
    from persmem_core.cli import get_host

    from .service import open_service

    return open_service(get_host())


@click.group()
def amq() -> None:
    """Agent mail (AMQ): mailbox status, send as an operator, peek at an inbox."""


@amq.command()
def status() -> None:
    """Mailboxes with their unread, read, quarantined and in-flight file counts."""
    store = _store()
    click.echo(f"mail root: {store.root}")
    for name in store.roster():
        box = store.box(name)
        click.echo(f"  {name:<20} unread {box.unread_count():>5}  read {len(box.names('cur')):>6}  "
                   f"quarantined {len(box.quarantined()):>3}  tmp {box.tmp_count():>3}")


@amq.command()
@click.option("--from", "sender", required=True, help="Sender mailbox (this command runs with file access, so it "
              "can speak for any agent: keep it to your operator name).")
@click.option("--to", "to", required=True, help="Recipient(s), comma-separated, or 'all'.")
@click.option("--subject", default="")
@click.option("--kind", default="message")
@click.option("--priority", default="normal")
@click.argument("body", required=False)
def send(sender: str, to: str, subject: str, kind: str, priority: str, body: str | None) -> None:
    """Send BODY (or standard input) as a message."""
    from persmem_core import UserError

    store = _store()
    text = body if body is not None else sys.stdin.read()
    try:
        result = store.send(sender.strip().lower(), to, text, subject, kind, priority)
    except UserError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result))


@amq.command()
@click.argument("agent")
@click.option("--all", "everything", is_flag=True, help="Read messages too, not only unread.")
def peek(agent: str, everything: bool) -> None:
    """Print AGENT's unread message headers (nothing is marked read)."""
    from .store import headers

    entries, bad = _store().box(agent).scan(("new", "cur") if everything else ("new",))
    for entry in sorted(entries, key=lambda e: e.message.header.created):
        click.echo(json.dumps(headers(entry) | {"status": "unread" if entry.folder == "new" else "read"}))
    for item in bad:
        click.echo(f"quarantined {item.folder}/{item.name}: {item.reason}", err=True)

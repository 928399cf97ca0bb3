"""`persmem amq ...`: look at the mailboxes and send mail from the command line (for a human operator).

These work on the mail root directly, beside a running server: Maildir needs no lock. Each command opens
its own store (service.open_service) for its length; a server's store is in that server's process. With a mail
backend (another plugin's `amq_backend`, such as amq_nats on a [cluster]) they work on the backend instead, and
`migrate` copies the Maildir root into it.
"""

from __future__ import annotations

import contextlib
import json
import sys

import click


@contextlib.contextmanager
def _store():
    from persmem_core.sdk import get_host

    from .service import open_service

    store = open_service(get_host())
    try:
        yield store
    finally:
        store.close()


@click.group()
def amq() -> None:
    """Agent mail (AMQ): mailbox status, send as an operator, peek at an inbox."""


@amq.command()
def status() -> None:
    """Mailboxes with their unread, read, quarantined and in-flight file counts."""
    with _store() as store:
        click.echo(f"mail root: {store.root}" if store.backend is None else f"mail: {store.where()}")
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
    from persmem_core.sdk import UserError

    text = body if body is not None else sys.stdin.read()
    try:
        with _store() as store:
            result = store.send(sender.strip().lower(), to, text, subject, kind, priority)
    except UserError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(result))


@amq.command()
@click.argument("agent")
@click.option("--all", "everything", is_flag=True, help="Read messages too, not only unread.")
def peek(agent: str, everything: bool) -> None:
    """Print AGENT's unread message headers (nothing is marked read)."""
    from .rows import headers

    with _store() as store:
        entries, bad = store.box(agent).scan(("new", "cur") if everything else ("new",))
    for entry in sorted(entries, key=lambda e: e.message.header.created):
        click.echo(json.dumps(headers(entry) | {"status": "unread" if entry.folder == "new" else "read"}))
    for item in bad:
        click.echo(f"quarantined {item.folder}/{item.name}: {item.reason}", err=True)


@amq.command()
def migrate() -> None:
    """Copy every message of the Maildir mail root (unread and read, read ones stay read) into the mail backend in
    use, such as NATS JetStream with persmem-plugin-amq-nats and [cluster] servers. Safe to run twice: what the
    backend holds already is skipped. The Maildir is left as it is."""
    from persmem_core.sdk import get_host

    from .migrate import migrate_mail
    from .service import mail_root
    from .store import MailStore

    host = get_host()
    with _store() as store:
        if store.backend is None:
            raise click.ClickException(
                "no mail backend other than the Maildir is in use, so there is nowhere to migrate to. Install one "
                "(pip install persmem-plugin-amq-nats) and set [cluster] servers in persmem.toml, then run this again.")
        root = mail_root(host)
        if not root.is_dir():
            raise click.ClickException(f"there is no Maildir mail root at {root} ([amq] root); nothing to migrate.")
        maildir = MailStore(root, host.section("amq"))  # not opened: the Maildir is only read
        click.echo(f"migrating {root} into {store.where()} ...")
        counts = migrate_mail(maildir, store.backend)
    click.echo(f"{counts['mailboxes']} mailbox(es): {counts['copied']} message(s) copied ({counts['copied_read']} "
               f"of them read), {counts['already_there']} already there, {counts['marked_read']} marked read, "
               f"{counts['not_messages']} file(s) that are not messages left behind.")
    click.echo(json.dumps(counts))

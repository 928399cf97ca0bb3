"""The AMQ plugin's hooks: its own hook (`amq_backend`, where mail is kept), config, tools, the /amq HTTP endpoint,
CLI, lifecycle, doctor, backup and restore, reseal (`persmem key migrate|rotate`), and the Mail section of what a
session starts with (the core's `briefing_sections` hook). The mail store itself is the service (service.py), kept in `host.state` from startup to shutdown."""

from __future__ import annotations

from persmem_core.sdk import hookimpl

from . import hookspecs
from .config import AmqConfig


@hookimpl
def add_hookspecs(add):
    add(hookspecs)


@hookimpl
def register_config(register):
    register("amq", AmqConfig)


@hookimpl
def register_tools(register):
    from .tools import ALL_TOOLS

    for tool in ALL_TOOLS:
        register(tool, tool_set="mail")


@hookimpl
def register_routes(register, host):
    from .service import service
    from .web import build_app

    register("/amq", build_app(lambda: service(host)), auth="agent")


@hookimpl
def register_panels(register, host):
    from .panels import register as register_mail_panel

    register_mail_panel(register)


@hookimpl
def register_commands(cli):
    from .commands import amq

    cli.add_command(amq)


@hookimpl
def startup(host):
    from .service import NAME, open_service

    host.state.put(NAME, open_service(host))


@hookimpl
def shutdown(host):
    from .service import NAME

    store = host.state.pop(NAME)
    if store is not None:
        store.close()  # a Maildir holds no open files; a backend stops its background work


@hookimpl
def briefing_sections(host, agent, project, cwd, budget_chars):
    """What a session starts with (the sessions plugin's briefing, the memory plugin's chorus_init): the Mail
    section (unread count, newest senders and subjects; amq_read gives a body). Nothing is marked read."""
    from .service import briefing_section, service

    section = briefing_section(service(host), agent, budget_chars)
    return [section] if section else []


@hookimpl
def doctor(host):
    import os

    from persmem_core.sdk import fail, pass_, warn

    from .service import mail_root, open_service

    root = mail_root(host)
    try:
        store = open_service(host)  # its own store: doctor also runs without a server
    except OSError as exc:
        return [fail("amq mail root", f"{root}: {exc.strerror or exc}")]
    if store.backend is not None:  # the backend's plugin checks the backend itself in its own doctor
        try:
            boxes = store.on_disk()
            return [pass_("amq mail", f"{store.where()}: {len(boxes)} mailbox(es), "
                          f"{sum(store.box(b).unread_count() for b in boxes)} unread")]
        finally:
            store.close()
    if not os.access(root, os.W_OK):
        return [fail("amq mail root", f"{root} is not writable by this user")]
    boxes = store.on_disk()
    checks = [pass_("amq mail root", f"{root}: {len(boxes)} mailbox(es), "
                    f"{sum(store.box(b).unread_count() for b in boxes)} unread")]
    if host.section("amq").encrypt and not host.section("encryption").enabled:
        checks.append(warn("amq encryption", "[amq] encrypt is on but [encryption] enabled is off, so new mail is "
                           "written plain; turn [encryption] on (then `persmem key migrate` seals existing mail)"))
    for name in boxes:
        bad = store.box(name).quarantined()
        if bad:
            checks.append(warn(f"amq mailbox {name}", f"{len(bad)} quarantined file(s) in "
                               f"{store.box(name).quarantine_dir} (not messages; inspect, then delete)"))
    return checks


@hookimpl
def backup(host, dest):
    """Copy every mailbox's delivered messages (new/ and cur/; tmp/ holds nothing acknowledged), byte for byte:
    sealed messages stay sealed (no key needed). With a mail backend in use, its mail, in the same layout."""
    from .backup import backup_backend, backup_mail
    from .service import mail_backend, mail_root

    backend = mail_backend(host)
    if backend is None:
        backup_mail(mail_root(host), dest)
        return
    from .store import MailStore

    store = MailStore(mail_root(host), host.section("amq"), backend=backend)
    try:
        backup_backend(store, dest)
    finally:
        store.close()


@hookimpl
def restore(host, src):
    """Put every mailbox's messages back into an empty mail root (refused when it holds anything)."""
    from .backup import restore_mail
    from .service import mail_root

    restore_mail(mail_root(host), src)


@hookimpl
def reseal(host, sealer, progress, dry_run):
    """Every message file rewritten (atomically, in place) sealed when [amq] encrypt is on and [encryption]
    enabled, else plain; see reseal.py. Runs with no server."""
    from .reseal import reseal_mail
    from .service import mail_root

    return reseal_mail(mail_root(host), host.section("amq"), sealer, progress, dry_run)

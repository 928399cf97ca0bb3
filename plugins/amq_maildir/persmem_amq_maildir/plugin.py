"""The AMQ plugin's hooks: config, tools, the /amq HTTP endpoint, CLI, lifecycle, doctor, backup, and the
answer to the memory plugin's `inbox_summary` question (a hook, not an import)."""

from __future__ import annotations

from persmem_core import hookimpl

from .config import AmqConfig

DATA_FOLDER = "amq"
_stores: dict[int, object] = {}


def mail_root(host):
    from pathlib import Path

    root = host.section("amq").root
    return Path(root).expanduser() if root else host.data_dir(DATA_FOLDER)


def open_store(host):
    from .store import MailStore

    return MailStore(mail_root(host), host.section("amq"), host.agents.names).open()


def store_for(host):
    store = _stores.get(id(host))
    if store is None:  # stdio or CLI use before startup, or a host without a server
        store = _stores[id(host)] = open_store(host)
    return store


@hookimpl
def register_config(register):
    register("amq", AmqConfig)


@hookimpl
def register_tools(register):
    from .tools import ALL_TOOLS

    for tool in ALL_TOOLS:
        register(tool)


@hookimpl
def register_routes(register, host):
    from .web import build_app

    register("/amq", build_app(lambda: store_for(host)), auth="agent")


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
    _stores[id(host)] = open_store(host)


@hookimpl
def shutdown(host):
    _stores.pop(id(host), None)


@hookimpl(optionalhook=True)
def inbox_summary(host, agent):
    """Unread mail for the memory plugin's chorus_init: counts and the newest unread messages with bodies.
    Nothing is marked read."""
    from .store import full

    entries, _ = store_for(host).box(agent).scan(("new",))
    entries.sort(key=lambda e: e.message.header.created, reverse=True)
    return {"available": True, "unread": len(entries), "messages": [full(e) for e in entries[:10]],
            "note": "peeked, not marked read: amq_read each message you act on"}


@hookimpl
def doctor(host):
    from persmem_core.doctor import fail, pass_, warn

    root = mail_root(host)
    try:
        store = open_store(host)
    except OSError as exc:
        return [fail("amq mail root", f"{root}: {exc.strerror or exc}")]
    import os

    if not os.access(root, os.W_OK):
        return [fail("amq mail root", f"{root} is not writable by this user")]
    boxes = store.on_disk()
    checks = [pass_("amq mail root", f"{root}: {len(boxes)} mailbox(es), "
                    f"{sum(store.box(b).unread_count() for b in boxes)} unread")]
    for name in boxes:
        bad = store.box(name).quarantined()
        if bad:
            checks.append(warn(f"amq mailbox {name}", f"{len(bad)} quarantined file(s) in "
                               f"{store.box(name).quarantine_dir} (not messages; inspect, then delete)"))
    return checks


@hookimpl
def backup(host, dest):
    """Copy every mailbox's delivered messages (new/ and cur/; tmp/ holds nothing acknowledged)."""
    from .backup import backup_mail

    backup_mail(mail_root(host), dest)

"""The sessions plugin's hooks: config, its own hookspecs, tools, the /sessions endpoints the client hooks call,
the dashboard panel, `persmem hooks` and `persmem sessions`, lifecycle, backup, restore and reseal (encryption at
rest: `persmem key migrate|rotate`). The sessions of this
host are the service (service.py), kept in `host.state` from startup to shutdown."""

from __future__ import annotations

from persmem_core.sdk import hookimpl

from .config import SessionsConfig


@hookimpl
def add_hookspecs(add):
    from . import hookspecs

    add(hookspecs)


@hookimpl
def register_config(register):
    register("sessions", SessionsConfig)


@hookimpl
def register_tools(register):
    from .tools import ALL_TOOLS

    for tool in ALL_TOOLS:
        register(tool, tool_set="sessions")


@hookimpl
def register_routes(register, host):
    from .service import service
    from .web import build_app, build_client_app

    register("/sessions", build_app(lambda: service(host)), auth="agent")
    register("/hooks", build_client_app(), auth="none")  # the hook client file: no secret in it, no auth


@hookimpl
def register_panels(register, host):
    from .panels import register as register_sessions_panel

    register_sessions_panel(register)


@hookimpl
def register_commands(cli):
    from .commands import hooks, sessions

    cli.add_command(hooks)
    cli.add_command(sessions)


@hookimpl
def startup(host):
    from .service import NAME, open_service

    host.state.put(NAME, open_service(host))


@hookimpl
def shutdown(host):
    from .service import NAME

    service = host.state.pop(NAME)
    if service is not None:
        service.close()


@hookimpl
def backup(host, dest):
    from .backup import backup_sessions
    from .service import data_folder

    backup_sessions(data_folder(host), dest)  # as stored: no key needed


@hookimpl
def restore(host, src):
    from .backup import restore_sessions
    from .service import data_folder

    restore_sessions(data_folder(host), src, host.sealer)


@hookimpl
def reseal(host, sealer, progress, dry_run):
    """Every archive and metadata file rewritten (atomically) to the state new writes have; see reseal.py."""
    from .reseal import reseal_sessions
    from .service import data_folder

    return reseal_sessions(data_folder(host), sealer, progress, dry_run)


@hookimpl
def doctor(host):
    """Whether Codex trusts persmem's hooks (it skips an untrusted or changed hook without a word)."""
    from .codex_trust import doctor_checks

    return doctor_checks(host.environ)

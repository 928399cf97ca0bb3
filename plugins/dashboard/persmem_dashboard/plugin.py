"""The dashboard plugin's hooks: declare `register_panels` (hookspecs.py) for the other plugins, mount the app in
`persmem serve` (built here, with every plugin's panels; service.py says why nothing goes in `host.state`), the
[dashboard] section, the System panel, and `persmem dashboard` to serve it alone."""

from __future__ import annotations

from persmem_core.sdk import hookimpl

from .config import DashboardConfig


@hookimpl
def add_hookspecs(add):
    from . import hookspecs

    add(hookspecs)


@hookimpl
def register_config(register):
    register("dashboard", DashboardConfig)


@hookimpl
def register_routes(register, host):
    cfg = host.section("dashboard")
    if not cfg.enabled:
        return
    from .app import build_dashboard

    # auth "none": the dashboard checks its own login; the title makes it where a browser opening / lands
    register(cfg.prefix, build_dashboard(host, cfg.prefix), auth="none", title="dashboard")


@hookimpl
def register_panels(register, host):
    from . import system

    register("system", title="System", template=system.TEMPLATE, context=system.context, order=90)


@hookimpl
def register_commands(cli):
    from .commands import dashboard

    cli.add_command(dashboard)


@hookimpl
def doctor(host):
    from persmem_core.sdk import pass_, warn

    cfg = host.section("dashboard")
    if not cfg.enabled:
        return [warn("dashboard", "disabled ([dashboard] enabled = false)")]
    if not host.agents.names():
        return [warn("dashboard", "no agent can log in yet: `persmem agent add NAME` and log in with its token")]
    return [pass_("dashboard", f"at {cfg.prefix} of the server; log in with an agent's token")]

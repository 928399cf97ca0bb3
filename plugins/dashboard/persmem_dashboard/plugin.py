"""The dashboard plugin's hooks: declare `register_panels` (hookspecs.py) for the other plugins, mount the app in
`persmem serve` (its panels collected here, its app built on the first request; service.py says why nothing goes
in `host.state`), the [dashboard] section, the System panel, and `persmem dashboard` to serve it alone."""

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
    from .lazy_app import LazyApp
    from .service import open_service

    dashboard = open_service(host)  # the panels now: two plugins claiming one id stop the server before it serves

    def build():
        from .app import build_dashboard

        return build_dashboard(host, cfg.prefix, dashboard)

    # Built on its first request: Litestar and Jinja take ~1 s to import, which a restarted server's first search
    # would otherwise wait for (the memory store loads meanwhile, and both need the GIL).
    # auth "none": the dashboard checks its own login; the title makes it where a browser opening / lands
    register(cfg.prefix, LazyApp(build), auth="none", title="dashboard")


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

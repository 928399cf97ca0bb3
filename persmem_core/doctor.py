"""The runner behind `persmem doctor` (every plugin's checks, persmem_core/checks.py) and the core's port check."""

from __future__ import annotations

from typing import TYPE_CHECKING

from persmem_core.checks import Check, fail, pass_, warn
from persmem_core.net.addresses import port_is_free
from persmem_core.plugins import call_each

if TYPE_CHECKING:
    from persmem_core.host import Host


def check_port(host: Host, bind_host: str, port: int) -> Check:
    """Is [server] host:port free for `persmem serve`? Inside a running server (the dashboard's System page
    runs doctor there) the port is busy because this very process listens on it: that is a PASS, not the
    "is persmem already running?" warning. `serving_addresses` is what the Host listens on (empty when not
    serving; read with getattr so a Host without it still gets the plain check)."""
    where = f"{bind_host}:{port}"
    if (bind_host, port) in getattr(host, "serving_addresses", set()):
        return pass_("port free", f"{where} is this server's own address (doctor runs inside it)")
    if port_is_free(bind_host, port):
        return pass_("port free", where)
    return warn("port free", f"{where} is in use (is persmem already running?); set [server] port or --port.")


def run_doctor(host: Host) -> list[Check]:
    """Every plugin's checks, in plugin order; a crashing check becomes a FAIL line, never a traceback."""
    checks: list[Check] = []
    for plugin, result, exc in call_each(host.pm, "doctor", host=host):
        if exc is not None:
            checks.append(fail(f"plugin {plugin} checks", f"the check itself crashed: {type(exc).__name__}: {exc}"))
            continue
        for item in result or []:
            checks.append(item if isinstance(item, Check) else fail(f"plugin {plugin} checks", f"returned {item!r}"))
    return checks

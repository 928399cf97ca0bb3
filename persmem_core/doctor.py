"""The runner behind `persmem doctor` (every plugin's checks, persmem_core/checks.py) and the core's port check."""

from __future__ import annotations

import os
from pathlib import Path
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
    serving; read with getattr so a Host without it still gets the plain check). From outside (the CLI's doctor),
    a port held by this home's own server (the owner lock's holder listens on it) that answers its health check
    is a PASS too; anything else holding it is the warning."""
    where = f"{bind_host}:{port}"
    if (bind_host, port) in getattr(host, "serving_addresses", set()):
        return pass_("port free", f"{where} is this server's own address (doctor runs inside it)")
    if port_is_free(bind_host, port):
        return pass_("port free", where)
    pid = _home_server_on(host.home, port)
    if pid is not None and _answers_health(host.home, bind_host, port):
        return pass_("server port", f"persmem server running and healthy on {where} (pid {pid})")
    return warn("port free", f"{where} is in use (is persmem already running?); set [server] port or --port.")


def _home_server_on(home: Path, port: int) -> int | None:
    """The pid of this home's persmem server (the owner lock's holder) when that process is the one listening on
    `port`, else None. Linux: the listening sockets of /proc/net/tcp{,6} against the holder's open files."""
    from persmem_core.transport.ownership import owner_pid

    pid = owner_pid(home)
    if pid is None:
        return None
    listening = _listening_inodes(port)
    try:
        held = {os.readlink(entry) for entry in Path(f"/proc/{pid}/fd").iterdir()}
    except OSError:  # not our process, gone, or no /proc
        return None
    return pid if any(f"socket:[{inode}]" in held for inode in listening) else None


def _listening_inodes(port: int) -> set[str]:
    """Inodes of the sockets listening (state 0A) on `port`, any address."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def _answers_health(home: Path, bind_host: str, port: int) -> bool:
    """The server answers: GET /healthz over HTTP says 200, or (TLS in front, say) the home's local socket is
    listened on by the owner."""
    import httpx2

    from persmem_core.paths import socket_path
    from persmem_core.transport.ownership import answers_for_owner

    address = "127.0.0.1" if bind_host in ("0.0.0.0", "") else "[::1]" if bind_host == "::" else bind_host
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    try:
        if httpx2.get(f"http://{address}:{port}/healthz", timeout=2.0).status_code == 200:
            return True
    except httpx2.HTTPError:
        pass
    return answers_for_owner(home, socket_path(home))


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

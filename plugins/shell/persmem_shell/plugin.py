"""The shell plugin's hooks: the [shell] section, the workspace tools, and doctor lines that print the
workspace roots and the effective command allowlist."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from persmem_core import hookimpl

from .config import ShellConfig


@dataclass(frozen=True)
class Workspace:
    config: ShellConfig
    sandbox: object


def workspace(host) -> Workspace:
    from .sandbox import Sandbox

    config = host.section("shell")
    roots = [Path(r).expanduser() for r in config.roots] or [host.data_dir("workspace")]
    return Workspace(config, Sandbox(roots, hidden=[host.home, host.config_path]))


@hookimpl
def register_config(register):
    register("shell", ShellConfig)


@hookimpl
def register_tools(register, host):
    from .tools import ALL_TOOLS, shell_exec

    limit = host.section("shell").max_concurrent_per_agent
    for tool in ALL_TOOLS:
        register(tool, max_concurrent_per_agent=limit if tool is shell_exec else None)


@hookimpl
def startup(host):
    """Say once, in the server log, when commands will run without the OS sandbox."""
    import logging

    from persmem_core import bubblewrap

    mode = host.section("shell").sandbox
    if mode == "auto" and bubblewrap.problem() is not None:
        logging.getLogger("persmem.shell").warning(
            "[shell] sandbox = auto: %s; commands run without the OS sandbox (persmem doctor)",
            bubblewrap.problem())


@hookimpl
def doctor(host):
    import shutil

    from persmem_core import bubblewrap
    from persmem_core.doctor import fail, pass_, warn

    ws = workspace(host)
    checks = []
    for root in ws.sandbox.roots:
        checks.append(pass_("shell workspace", str(root)) if root.is_dir() else
                      fail("shell workspace", f"{root} does not exist; create it or fix [shell] roots"))
    rules = ws.config.effective_allow()
    described = []
    for name, rule in sorted(rules.items()):
        text = name + (f" ({'/'.join(rule.subcommands)})" if rule.subcommands else "")
        described.append(text + (f" -deny {' '.join(rule.deny)}" if rule.deny else ""))
    checks.append(pass_("shell allowlist", "; ".join(described)))
    checks.append(bubblewrap.doctor_line(ws.config.sandbox, "shell"))
    if ws.sandbox.exposed():
        checks.append(warn("shell workspace", f"{', '.join(map(str, ws.sandbox.exposed()))} contains the persmem "
                                              f"data folder {host.home}; the tools keep out of it (shell_exec "
                                              "only with the OS sandbox), but a workspace beside the data is "
                                              "safer"))
    missing = [name for name in rules if shutil.which(name, path="/usr/local/bin:/usr/bin:/bin") is None]
    if missing:
        checks.append(warn("shell allowlist", f"allowed but not installed: {', '.join(sorted(missing))}"))
    return checks

"""The shell plugin's hooks: the [shell] section, the workspace tools, the service kept in host.state, and
doctor lines that print the workspace roots and the effective command allowlist."""

from __future__ import annotations

from persmem_core.sdk import hookimpl

from .config import ShellConfig


@hookimpl
def register_config(register):
    register("shell", ShellConfig)


@hookimpl
def register_tools(register, host):
    from .tools import ALL_TOOLS, shell_exec

    limit = host.section("shell").max_concurrent_per_agent
    for tool in ALL_TOOLS:
        register(tool, max_concurrent_per_agent=limit if tool is shell_exec else None, tool_set="workspace")


@hookimpl
def startup(host):
    """Build the service the tools use; with sandbox = "required" and no full OS sandbox here, stop the server
    start naming why; with "auto", say loudly in the server's first lines when commands get less than it."""
    from persmem_core.sdk import bubblewrap

    from .service import NAME, open_service

    shell = open_service(host)
    bubblewrap.check_at_start(shell.config.sandbox, "shell")  # "required" without the full sandbox: no start
    host.state.put(NAME, shell)


@hookimpl
def shutdown(host):
    from .service import NAME

    host.state.pop(NAME)


@hookimpl
def doctor(host):
    import shutil

    from persmem_core.sdk import UserError, bubblewrap
    from persmem_core.sdk import SAFE_PATH
    from persmem_core.sdk import fail, pass_, warn

    from .service import open_service

    shell = open_service(host)
    try:
        sandbox = shell.sandbox
    except UserError as exc:
        return [fail("shell workspace", str(exc))]
    checks = []
    for root in sandbox.roots:
        checks.append(pass_("shell workspace", str(root)) if root.is_dir() else
                      fail("shell workspace", f"{root} does not exist; create it or fix [workspace] roots"))
    rules = shell.config.effective_allow()
    described = []
    for name, rule in sorted(rules.items()):
        text = name + (f" ({'/'.join(rule.subcommands)})" if rule.subcommands else "")
        described.append(text + (f" -deny {' '.join(rule.deny)}" if rule.deny else ""))
    checks.append(pass_("shell allowlist", "; ".join(described)))
    checks.append(bubblewrap.doctor_line(shell.config.sandbox, "shell"))
    if sandbox.exposed():
        checks.append(warn("shell workspace", f"{', '.join(map(str, sandbox.exposed()))} contains the persmem "
                                              f"data folder {host.home}; the tools keep out of it (shell_exec "
                                              "only with the OS sandbox), but a workspace beside the data is "
                                              "safer"))
    missing = [name for name in rules if shutil.which(name, path=SAFE_PATH) is None]
    if missing:
        checks.append(warn("shell allowlist", f"allowed but not installed: {', '.join(sorted(missing))}"))
    return checks

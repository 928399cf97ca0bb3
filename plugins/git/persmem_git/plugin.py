"""The git plugin's hooks: the [git] section, the git_op tool, the service kept in host.state, and doctor
lines."""

from __future__ import annotations

from persmem_core.sdk import hookimpl

from .config import GitConfig


@hookimpl
def register_config(register):
    register("git", GitConfig)


@hookimpl
def register_tools(register, host):
    from .tools import git_op

    register(git_op, max_concurrent_per_agent=host.section("git").max_concurrent_per_agent, tool_set="workspace")


@hookimpl
def startup(host):
    """Build the service git_op uses; with sandbox = "required" and no full OS sandbox here, stop the server
    start naming why; with "auto", say loudly in the server's first lines when commands get less than it."""
    from persmem_core.sdk import bubblewrap

    from .service import NAME, open_service

    git = open_service(host)
    bubblewrap.check_at_start(git.config.sandbox, "git")  # "required" without the full sandbox: no start
    host.state.put(NAME, git)


@hookimpl
def shutdown(host):
    from .service import NAME

    host.state.pop(NAME)


@hookimpl
def doctor(host):
    import shutil

    from persmem_core.sdk import UserError, bubblewrap
    from persmem_core.sdk import fail, pass_

    from .service import open_service

    if shutil.which("git") is None:
        return [fail("git", "the git program is not installed (apt-get install git)")]
    git = open_service(host)
    try:
        roots = git.roots
    except UserError as exc:
        return [fail("git roots", str(exc))]
    return [pass_("git roots", ", ".join(map(str, roots))),
            pass_("git remotes", ", ".join(git.config.remotes) or "none allowed (no clone/fetch/pull/push)"),
            bubblewrap.doctor_line(git.config.sandbox, "git")]

"""The git plugin's hooks: the [git] section, the git_op tool and doctor lines."""

from __future__ import annotations

import os
from pathlib import Path

from persmem_core import hookimpl

from .config import GitConfig


def settings(host):
    """(config, resolved roots, the empty HOME git runs with)."""
    cfg = host.section("git")
    roots = [Path(os.path.realpath(Path(r).expanduser())) for r in cfg.roots] or \
        [Path(os.path.realpath(host.data_dir("workspace")))]
    if Path("/") in roots:
        from persmem_core import UserError

        raise UserError("[git] roots contains / : that would make every repository on the machine reachable. List "
                        "the project folders instead.")
    home = host.data_dir("git") / "empty-home"
    home.mkdir(exist_ok=True)
    return cfg, roots, home


@hookimpl
def register_config(register):
    register("git", GitConfig)


@hookimpl
def register_tools(register, host):
    from .tools import git_op

    register(git_op, max_concurrent_per_agent=host.section("git").max_concurrent_per_agent)


@hookimpl
def startup(host):
    """Say once, in the server log, when commands will run without the OS sandbox."""
    import logging

    from persmem_core import bubblewrap

    mode = host.section("git").sandbox
    if mode == "auto" and bubblewrap.problem() is not None:
        logging.getLogger("persmem.git").warning(
            "[git] sandbox = auto: %s; commands run without the OS sandbox (persmem doctor)",
            bubblewrap.problem())


@hookimpl
def doctor(host):
    import shutil

    from persmem_core import bubblewrap
    from persmem_core.doctor import fail, pass_

    if shutil.which("git") is None:
        return [fail("git", "the git program is not installed (apt-get install git)")]
    cfg, roots, _ = settings(host)
    return [pass_("git roots", ", ".join(map(str, roots))),
            pass_("git remotes", ", ".join(cfg.remotes) or "none allowed (no clone/fetch/pull/push)"),
            bubblewrap.doctor_line(cfg.sandbox, "git")]

"""Built-in `persmem` subcommands, one module each, and `get_host`, which every command (the plugins' too,
through `persmem_core.cli.main.get_host`) uses to reach the Host the `persmem` process built at start."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from persmem_core.host import Host


def get_host(ctx: click.Context | None = None) -> Host:
    """The Host this process built at start (plugins loaded, config validated on first use)."""
    from persmem_core.fileio import use_private_umask

    # Whatever a command writes (the server's data, an export, a backup) is this user's alone: one place for every
    # `persmem` process (a Host built inside another program, a test's, leaves that program's umask alone).
    use_private_umask()
    ctx = ctx or click.get_current_context()
    return ctx.find_root().obj["host"]

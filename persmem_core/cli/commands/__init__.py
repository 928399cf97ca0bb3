"""Built-in `persmem` subcommands, one module each, and `get_host`, which every command (the plugins' too,
through `persmem_core.cli.main.get_host`) uses to reach the Host the `persmem` process built at start.

- `serve.py`       `persmem serve`: run the MCP server
- `agent.py`       `persmem agent add|token|secret-path|list|revoke`: named agents and their credentials
- `connect.py`     `persmem connect AGENT`: ready-to-paste client setup
- `config.py`      `persmem config show|check|schema|reference|path`
- `doctor.py`      `persmem doctor`: one line per check; exit 1 on any FAIL
- `plugins.py`     `persmem plugins`: what is installed, what loaded, and why not
- `plugin_new.py`  `persmem plugin new NAME`: scaffold a working plugin distribution
- `key.py`         `persmem key status|export|import|rotate|migrate`: the key that seals the data at rest
- `oauth.py`       `persmem oauth clients|revoke|password|approve-code`: remote clients signed in with OAuth
- `backup.py`      `persmem backup DEST`: the home, every plugin's data, consistently
- `restore.py`     `persmem restore SRC`: a backup put back into a fresh home
- `cluster.py`     `persmem cluster up|status|user`: a local NATS cluster for trials, the configured one's state
"""

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

"""[git] section of persmem.toml: remotes, authors and limits (repositories must be under the core's
[workspace] roots)."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from persmem_core.sdk import ConfigSection, bubblewrap


class GitConfig(ConfigSection):
    remotes: Annotated[
        list[str],
        Meta(description="URL prefixes clone/fetch/pull/push may talk to, e.g. \"https://github.com/me/\" or "
                         "\"git@github.com:me/\". Empty: no network operations."),
    ] = []
    authors: Annotated[
        dict[str, str],
        Meta(description='Commit author per agent: {kite = "Kite Bot <kite@example.org>"}. '
                         "Default: <agent> <agent@persmem.local>."),
    ] = {}
    allow_force_push: Annotated[bool, Meta(description="Allow push --force / --force-with-lease / +refspec.")] = False
    timeout: Annotated[float, Meta(gt=0, description="Seconds before a git command is stopped.")] = 120.0
    max_output_bytes: Annotated[int, Meta(ge=1024, description="stdout is cut at this size.")] = 512_000
    sandbox: bubblewrap.SandboxSetting = "auto"  # git has a network only for clone/fetch/pull/push
    max_memory_mb: Annotated[
        int, Meta(ge=64, description="Memory of one git command, MB (a cgroup, where the server runs as root).")
    ] = 2048
    min_free_disk_mb: Annotated[
        int, Meta(ge=0, description="git is stopped (and does not start) while a workspace root's disk has less "
                                    "free space than this, MB.")
    ] = 1024
    max_concurrent_per_agent: Annotated[
        int, Meta(ge=1, description="git operations one agent may run at once; more are refused until one ends.")
    ] = 4

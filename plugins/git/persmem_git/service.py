"""The git plugin's service: what git_op needs on every call, built once at startup and kept in `host.state`
under NAME.

It holds the [git] config, the [workspace] roots repositories must be under, persmem's own files (never part
of a repository git_op touches) and the empty HOME git runs with (in the plugin's own data folder).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from .config import GitConfig

NAME = "git"  # the entry-point name: the key in host.state


class GitService:
    def __init__(self, config: GitConfig, roots: Callable[[], list[Path]], hidden: list[Path], home: Path):
        self.config = config
        self._roots = roots
        self.hidden = hidden
        self.home = home

    @functools.cached_property
    def roots(self) -> list[Path]:
        """The [workspace] roots, resolved on first use: roots the host refuses (such as /) are then refused at
        every call with their fix, while the server's other plugins keep running."""
        return self._roots()


def open_service(host) -> GitService:
    home = host.data_dir("git") / "empty-home"
    home.mkdir(exist_ok=True)
    return GitService(host.section("git"), host.workspace_roots, host.private_paths(), home)


def service(host) -> GitService:
    """The service startup put in host.state (NotReady before startup or after shutdown)."""
    return host.state.get(NAME)

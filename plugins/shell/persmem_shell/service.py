"""The shell plugin's service: what shell_exec and the file tools share, built once at startup and kept in
`host.state` under NAME.

It holds the [shell] config, the workspace sandbox (the [workspace] roots with persmem's own files hidden) and
the folder for the TMPDIRs of commands run without the OS sandbox (the plugin's own data folder, where no
agent can plant a link).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from .config import ShellConfig
from .sandbox import Sandbox

NAME = "shell"  # the entry-point name: the key in host.state


class ShellService:
    def __init__(self, config: ShellConfig, roots: Callable[[], list[Path]], hidden: list[Path], tmp_folder: Path):
        self.config = config
        self._roots = roots
        self._hidden = hidden
        self.tmp_folder = tmp_folder

    @functools.cached_property
    def sandbox(self) -> Sandbox:
        """The workspace, resolved on first use: a [workspace] roots the host refuses (such as /) is then
        refused at every call with its fix, while the server's other plugins keep running."""
        return Sandbox(self._roots(), hidden=self._hidden)


def open_service(host) -> ShellService:
    return ShellService(host.section("shell"), host.workspace_roots, host.private_paths(),
                        host.data_dir("shell") / "tmp")


def service(host) -> ShellService:
    """The service startup put in host.state (NotReady before startup or after shutdown)."""
    return host.state.get(NAME)

"""What git reads is what was vetted: one lock, per server process, between the agent commands that can change
files in the workspace (shell_exec) and git_op, which vets a repository's files (its config, commondir,
alternates, nested repositories) and then has git read them.

Commands hold it shared while they run; git_op holds it alone from its vetting to git's exit. A sandboxed
command leaves nothing running behind it (its pid namespace dies with it), so while git_op holds the lock no
agent-controlled process can swap `.git/config` (or anything else git reads) between the check and the use.
The file tools never write inside a git folder, so they need no lock. A waiting git_op goes first: new commands
queue behind it, so a stream of commands cannot starve it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from persmem_core.errors import UserError


class WorkspaceLock:
    """A readers-writer lock: commands are readers, git_op is the writer; waits are bounded."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._commands = 0
        self._git = False
        self._git_waiting = 0

    @contextlib.contextmanager
    def command(self, timeout: float) -> Iterator[None]:
        """Held while one agent command runs; waits up to `timeout` seconds for a git_op to finish."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._git or self._git_waiting:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise UserError(f"a git_op is running in the workspace and did not finish within {timeout:g} s; "
                                    "nothing was run. Try again when it has finished.")
                self._changed.wait(left)
            self._commands += 1
        try:
            yield
        finally:
            with self._changed:
                self._commands -= 1
                self._changed.notify_all()

    @contextlib.contextmanager
    def git(self, timeout: float) -> Iterator[None]:
        """Held from vetting a repository to git's exit; waits up to `timeout` seconds for running commands."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self._git_waiting += 1
            try:
                while self._git or self._commands:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise UserError(f"{self._commands or 1} command(s) still running in the workspace after "
                                        f"{timeout:g} s; git_op waits for them so that git reads exactly what it "
                                        "vetted. Nothing was run; try again when they have finished.")
                    self._changed.wait(left)
                self._git = True
            finally:
                self._git_waiting -= 1
                self._changed.notify_all()
        try:
            yield
        finally:
            with self._changed:
                self._git = False
                self._changed.notify_all()


WORKSPACE = WorkspaceLock()  # the server process's one workspace (the [workspace] roots)

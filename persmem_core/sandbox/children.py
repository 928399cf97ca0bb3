"""Running a child process for a tool: no shell, stdin closed, a time limit and an output cap, and the whole
process group killed when either is reached (anything it left running in the background included).

Output is read as it comes and never kept beyond the cap, so a command that prints gigabytes costs no
more memory than the cap. Shared by the plugins that start programs (shell_exec, git_op); confine the
command first with `persmem_core.sandbox.bubblewrap` where it is wanted.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from persmem_core.errors import UserError
from persmem_core.fileio import launch_umask

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"  # the only PATH a child process gets (never the server's)
# How often a running command's `stop_when` is asked (one statvfs a writable root: cheap). A command writing to a
# RAM disk fills ~160 MB in 50 ms (seen in CI), so the disk floor is checked every 10 ms.
STOP_CHECK_SECONDS = 0.01


@dataclass
class Finished:
    returncode: int | None  # None: it did not exit even after the kill (should not happen)
    stdout: bytes
    stderr: bytes
    timed_out: bool
    truncated: bool  # stdout or stderr reached the cap and the command was stopped
    duration: float  # seconds
    stopped: str | None = None  # why `stop_when` stopped the command (e.g. the disk's floor), else None


def run_capped(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float, max_output: int,
               stderr_cap: int | None = None, stop_when: Callable[[], str | None] | None = None) -> Finished:
    """Run `command` until it exits, `timeout` seconds pass or its stdout/stderr reaches `max_output` bytes
    (stderr: `stderr_cap`, default the same), or `stop_when` (asked every STOP_CHECK_SECONDS while it runs)
    gives a reason to stop it."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
                                umask=launch_umask())  # the workspace's files get the user's modes, not persmem's 077
    except OSError as exc:
        raise UserError(f"{Path(command[0]).name} could not be started: {exc.strerror or exc}.") from None
    caps = {"stdout": max_output, "stderr": stderr_cap or max_output}
    buffers = {"stdout": bytearray(), "stderr": bytearray()}
    timed_out = truncated = False
    stopped = None
    deadline = start + timeout
    tick = STOP_CHECK_SECONDS if stop_when else 0.5
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
        sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
        while not (timed_out or truncated or stopped):
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            if stop_when is not None:
                stopped = stop_when()
                if stopped:
                    break
            if not sel.get_map():  # output closed: wait for the exit (still checking stop_when)
                try:
                    proc.wait(timeout=min(left, tick))
                    break
                except subprocess.TimeoutExpired:
                    continue
            for key, _ in sel.select(min(left, tick)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = buffers[key.data]
                room = caps[key.data] - len(buf)
                buf += chunk[:room]
                truncated = truncated or len(chunk) > room
    kill_group(proc)  # stops the command if still running, and anything it left in the background
    try:
        returncode = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        returncode = None
    proc.stdout.close()
    proc.stderr.close()
    return Finished(returncode, bytes(buffers["stdout"]), bytes(buffers["stderr"]), timed_out, truncated,
                    time.monotonic() - start, stopped)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

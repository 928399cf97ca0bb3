"""Running a child process for a tool: no shell, stdin closed, a time limit and an output cap, and the whole
process group killed when either is reached (anything it left running in the background included).

Output is read as it comes and never kept beyond the cap, so a command that prints gigabytes costs no
more memory than the cap. Shared by the plugins that start programs (shell_exec, git_op); confine the
command first with `persmem_core.bubblewrap` where it is wanted.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from persmem_core.errors import UserError

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"  # the only PATH a child process gets (never the server's)


@dataclass
class Finished:
    returncode: int | None  # None: it did not exit even after the kill (should not happen)
    stdout: bytes
    stderr: bytes
    timed_out: bool
    truncated: bool  # stdout or stderr reached the cap and the command was stopped
    duration: float  # seconds


def run_capped(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float, max_output: int,
               stderr_cap: int | None = None) -> Finished:
    """Run `command` until it exits, `timeout` seconds pass or its stdout/stderr reaches `max_output` bytes
    (stderr: `stderr_cap`, default the same)."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    except OSError as exc:
        raise UserError(f"{Path(command[0]).name} could not be started: {exc.strerror or exc}.") from None
    caps = {"stdout": max_output, "stderr": stderr_cap or max_output}
    buffers = {"stdout": bytearray(), "stderr": bytearray()}
    timed_out = truncated = False
    deadline = start + timeout
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
        sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
        while sel.get_map() and not (timed_out or truncated):
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(min(left, 0.5)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = buffers[key.data]
                room = caps[key.data] - len(buf)
                buf += chunk[:room]
                truncated = truncated or len(chunk) > room
    if not (timed_out or truncated):  # output closed: give the command the rest of its time to exit
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    kill_group(proc)  # stops the command if still running, and anything it left in the background
    try:
        returncode = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        returncode = None
    proc.stdout.close()
    proc.stderr.close()
    return Finished(returncode, bytes(buffers["stdout"]), bytes(buffers["stderr"]), timed_out, truncated,
                    time.monotonic() - start)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

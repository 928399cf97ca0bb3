"""Running an argv without a shell: minimal environment, stdin closed, time limit, output cap, and the
whole process group killed when the time is up or the output too long."""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import time
from pathlib import Path

from persmem_core import UserError

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"


def child_env(home: Path) -> dict[str, str]:
    """Nothing from the server's environment: no tokens, no LD_PRELOAD, no PATH tricks."""
    return {"PATH": SAFE_PATH, "HOME": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb",
            "PAGER": "cat", "GIT_PAGER": "cat", "NO_COLOR": "1"}


def run(argv: list[str], cwd: Path, home: Path, timeout: float, max_output: int) -> dict:
    env = child_env(home)
    exe = shutil.which(argv[0], path=env["PATH"])
    if exe is None:
        raise UserError(f"{argv[0]!r} is allowed but not installed on this machine.")
    start = time.monotonic()
    proc = subprocess.Popen(argv, executable=exe, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    buffers = {"stdout": bytearray(), "stderr": bytearray()}
    timed_out = truncated = False
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
        sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
        deadline = start + timeout
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
                room = max_output - len(buf)
                buf += chunk[:room]
                truncated = truncated or len(chunk) > room
    if not (timed_out or truncated):  # output closed: give the command the rest of its time to exit
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    _kill_group(proc)  # stops the command if still running, and anything it left in the background
    try:
        returncode = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        returncode = None
    proc.stdout.close()
    proc.stderr.close()
    result = {"command": argv, "returncode": returncode,
              "stdout": buffers["stdout"].decode("utf-8", "replace"),
              "stderr": buffers["stderr"].decode("utf-8", "replace"),
              "duration_ms": round((time.monotonic() - start) * 1000, 1)}
    if timed_out:
        result |= {"timed_out": True,
                   "note": f"stopped at the {timeout:g} s time limit; the whole process group was killed"}
    if truncated:
        result |= {"truncated": True,
                   "note": f"output cut at {max_output:,} bytes and the command stopped; narrow it (head, grep -m)"}
    return result


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

"""Running an allowed argv: a minimal environment, a private TMPDIR, a lower CPU priority; the time limit,
output cap and process-group kill are persmem_core.sdk.run_capped's.

With a `Confinement`, the command runs inside bubblewrap (persmem_core.sdk.bubblewrap) with its own /tmp and the
sandbox's limits;
without one, its TMPDIR is a fresh folder in the plugin's data folder, removed when the command ends (kill
included).
Commands run at a lower CPU priority (nice 10), so a busy command does not slow the server's other work.
"""

from __future__ import annotations

import contextlib
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from persmem_core.sdk import Finished, SAFE_PATH, UserError, bubblewrap, run_capped

NICE = ("nice", "-n", "10")


def child_env(home: Path) -> dict[str, str]:
    """Nothing from the server's environment: no tokens, no LD_PRELOAD, no PATH tricks."""
    return {"PATH": SAFE_PATH, "HOME": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb",
            "PAGER": "cat", "GIT_PAGER": "cat", "NO_COLOR": "1"}


@contextlib.contextmanager
def private_tmp(folder: Path, max_age: float) -> Iterator[Path]:
    """A fresh TMPDIR in `folder` (the plugin's own, where no agent can plant a link), removed afterwards;
    leftovers of a server killed mid-command (older than `max_age` seconds) are removed too."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    now = time.time()
    for old in folder.iterdir():
        with contextlib.suppress(OSError):
            if now - old.lstat().st_mtime > max_age:
                shutil.rmtree(old, ignore_errors=True)
    tmp = folder / secrets.token_hex(8)
    tmp.mkdir(mode=0o700)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(argv: list[str], cwd: Path, home: Path, timeout: float, max_output: int,
        confinement: bubblewrap.Confinement | None = None, tmp_folder: Path | None = None) -> dict:
    """Run `argv` in `cwd` with HOME=`home`: in the sandbox with its own /tmp, or else with a TMPDIR made in
    `tmp_folder` and removed when the command ends."""
    env = child_env(home)
    if shutil.which(argv[0], path=env["PATH"]) is None:
        raise UserError(f"{argv[0]!r} is allowed but not installed on this machine.")
    if confinement is not None:
        done = bubblewrap.run([*NICE, *argv], confinement, cwd=cwd, env=env | {"TMPDIR": "/tmp"}, timeout=timeout,
                              max_output=max_output)
        return _result(done, argv, timeout, max_output)
    with private_tmp(tmp_folder, max_age=timeout + 3600) as tmp:
        done = run_capped([*NICE, *argv], cwd=cwd, env=env | {"TMPDIR": str(tmp)}, timeout=timeout,
                          max_output=max_output)
        return _result(done, argv, timeout, max_output)


def _result(done: Finished, argv: list[str], timeout: float, max_output: int) -> dict:
    result = {"command": argv, "returncode": done.returncode,
              "stdout": done.stdout.decode("utf-8", "replace"),
              "stderr": done.stderr.decode("utf-8", "replace"),
              "duration_ms": round(done.duration * 1000, 1)}
    if done.timed_out:
        result |= {"timed_out": True,
                   "note": f"stopped at the {timeout:g} s time limit; the whole process group was killed"}
    if done.truncated:
        result |= {"truncated": True,
                   "note": f"output cut at {max_output:,} bytes and the command stopped; narrow it (head, grep -m)"}
    if done.stopped:
        result |= {"limit_reached": True, "note": done.stopped}
    return result

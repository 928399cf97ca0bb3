"""Running git so that nothing in a repository can make it run a program.

System and global config are ignored (GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL=/dev/null, an empty HOME),
hooks are off (core.hooksPath=/dev/null), and every config key that names a program is overridden on the
command line, which wins over the repository's own config (keys that cannot be neutralized that way, such
as diff.external or filter drivers, make repo.py refuse the repository instead). Only the protocols needed for the configured
remotes are allowed (never ext::).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from persmem_core import UserError

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
HARDENING = [
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.sshCommand=ssh -o BatchMode=yes", "core.pager=cat",
    "core.editor=false", "sequence.editor=false", "core.askPass=", "credential.helper=", "protocol.ext.allow=never",
    "commit.gpgSign=false", "tag.gpgSign=false", "submodule.recurse=false", "color.ui=never", "advice.detachedHead=false",
]


def author(agent: str, authors: dict[str, str]) -> tuple[str, str]:
    spec = authors.get(agent)
    if spec:
        match = re.fullmatch(r"\s*(.+?)\s*<([^<>]+)>\s*", spec)
        if match:
            return match.group(1), match.group(2)
    return agent, f"{agent}@persmem.local"


def git_env(home: Path, agent: str, authors: dict[str, str], protocols: str) -> dict[str, str]:
    name, email = author(agent, authors)
    return {"PATH": SAFE_PATH, "HOME": str(home), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0", "GIT_PROTOCOL_FROM_USER": "0", "GIT_ALLOW_PROTOCOL": protocols,
            "GIT_OPTIONAL_LOCKS": "0", "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def run_git(args: list[str], *, cwd: Path, env: dict[str, str], safe_dir: Path, timeout: float,
            max_output: int) -> dict:
    argv = ["git", "--no-pager"]
    for item in [*HARDENING, f"safe.directory={safe_dir}"]:
        argv += ["-c", item]
    argv += args
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise UserError(f"git {args[0]} did not finish within {timeout:g} s ([git] timeout) and was stopped.") from None
    result = {"returncode": proc.returncode, "stdout": stdout[:max_output].decode("utf-8", "replace"),
              "stderr": stderr[-20_000:].decode("utf-8", "replace"),
              "duration_ms": round((time.monotonic() - start) * 1000, 1)}
    if len(stdout) > max_output:
        result["truncated"] = True
    return result

"""Running git so that nothing in a repository can make it run a program.

System and global config are ignored (GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL=/dev/null, an empty HOME),
hooks are off (core.hooksPath=/dev/null), and every config key that names a program is overridden on the
command line, which wins over the repository's own config (keys that cannot be neutralized that way, such
as diff.external or filter drivers, make repo.py refuse the repository instead). Submodules are never
entered or recursed into, HTTP redirects are not followed, no background gc is left running, and only the
protocols needed for the configured remotes are allowed (never ext::).

With a `Confinement`, git runs inside bubblewrap (persmem_core.sdk.bubblewrap): it sees the workspace, the
system read-only and nothing of persmem's data, and has a network only for clone/fetch/pull/push.
"""

from __future__ import annotations

import re
from pathlib import Path

from persmem_core.sdk import Finished, SAFE_PATH, UserError, bubblewrap, run_capped

HARDENING = [
    "core.hooksPath=/dev/null", "core.fsmonitor=false", "core.sshCommand=ssh -o BatchMode=yes", "core.pager=cat",
    "core.editor=false", "sequence.editor=false", "core.askPass=", "credential.helper=", "protocol.ext.allow=never",
    "commit.gpgSign=false", "tag.gpgSign=false", "submodule.recurse=false", "color.ui=never", "advice.detachedHead=false",
    "diff.ignoreSubmodules=all", "status.submoduleSummary=false", "fetch.recurseSubmodules=false",
    "push.recurseSubmodules=no", "http.followRedirects=false", "log.showSignature=false", "gc.auto=0",
    "maintenance.auto=false",
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


def _hardened(args: list[str], safe_dir: Path) -> list[str]:
    argv = ["git", "--no-pager"]
    for item in [*HARDENING, f"safe.directory={safe_dir}"]:
        argv += ["-c", item]
    return argv + args


def reader(env: dict[str, str], confinement: bubblewrap.Confinement | None, timeout: float):
    """A repo.GitReader: git with the same hardening and sandbox as the operation (no network), for vetting."""
    quiet = None if confinement is None else bubblewrap.Confinement(
        writable=confinement.writable, read_only=confinement.read_only, hidden=confinement.hidden,
        limits=confinement.limits)

    def read(args: list[str], repo: Path, gitdir: Path) -> tuple[int, bytes, str]:
        env_for_repo = env | {"GIT_DIR": str(gitdir), "GIT_WORK_TREE": str(repo)}
        done = _run(_hardened(args, repo), quiet, cwd=repo, env=env_for_repo, timeout=timeout,
                    max_output=64 * 1024 * 1024)
        if done.timed_out or done.truncated:
            raise UserError(f"vetting {repo} took too long or printed too much (git {args[0]}); refused.")
        return done.returncode, done.stdout, done.stderr.decode("utf-8", "replace")

    return read


def _run(argv: list[str], confinement: bubblewrap.Confinement | None, *, cwd: Path, env: dict[str, str],
         timeout: float, max_output: int) -> Finished:
    if confinement is None:
        return run_capped(argv, cwd=cwd, env=env, timeout=timeout, max_output=max_output, stderr_cap=20_000)
    return bubblewrap.run(argv, confinement, cwd=cwd, env=env, timeout=timeout, max_output=max_output,
                          stderr_cap=20_000)


def run_git(args: list[str], *, cwd: Path, env: dict[str, str], safe_dir: Path, timeout: float,
            max_output: int, confinement: bubblewrap.Confinement | None = None) -> dict:
    done = _run(_hardened(args, safe_dir), confinement, cwd=cwd, env=env, timeout=timeout, max_output=max_output)
    if done.timed_out:
        raise UserError(f"git {args[0]} did not finish within {timeout:g} s ([git] timeout) and was stopped.")
    if done.stopped:
        raise UserError(f"git {args[0]} was {done.stopped}.")
    result = {"returncode": done.returncode, "stdout": done.stdout.decode("utf-8", "replace"),
              "stderr": done.stderr.decode("utf-8", "replace"), "duration_ms": round(done.duration * 1000, 1)}
    if done.truncated:
        result |= {"truncated": True, "note": f"output cut at {max_output:,} bytes ([git] max_output_bytes) and git "
                                              "stopped; narrow it (-n, a path, --stat)"}
    return result

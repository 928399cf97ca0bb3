"""Finding and vetting the repository a call names.

- the path must resolve inside a configured root (symlinks followed, components compared);
- `.git` must be a folder inside the roots, or a `gitdir:` file pointing inside the roots;
- the repository's own config must not set keys that run programs or redirect git (core.fsmonitor,
  core.sshCommand, filter drivers, aliases, includes, url rewrites...): such a repository is refused with
  the key named, rather than trusted to be overridden.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from persmem_core import UserError

DANGEROUS_KEY = re.compile(
    r"^(core\.(fsmonitor|sshcommand|hookspath|pager|editor|askpass|gitproxy|alternaterefscommand|worktree)"
    r"|filter\..+\.(clean|smudge|process)|diff\..+\.(textconv|command)|merge\..+\.driver"
    r"|credential(\..+)?\.helper|include\.path|includeif\..+\.path|alias\..+|sequence\.editor"
    r"|gpg(\..+)?\.program|uploadpack\..+|receive\..+|remote\..+\.(uploadpack|receivepack|proxy|vcs)"
    r"|http(\..+)?\.proxy|ssh\.variant|protocol\..+|url\..+\.(insteadof|pushinsteadof)"
    r"|pager\..+|difftool\..+|mergetool\..+|diff\.external|diff\.tool|merge\.tool|web\.browser|browser\..+\.(cmd|path)"
    r"|submodule\..+\.update|core\.attributesfile)$")


def inside(real: Path, roots: list[Path]) -> bool:
    return any(real == r or real.is_relative_to(r) for r in roots)


def resolve_repo(repo_path: str, roots: list[Path], must_exist: bool = True) -> Path:
    if not isinstance(repo_path, str) or not repo_path.strip():
        raise UserError(f"repo_path is empty; pass a repository folder under {', '.join(map(str, roots))}.")
    if "\x00" in repo_path:
        raise UserError("repo_path contains a NUL byte.")
    joined = Path(repo_path) if os.path.isabs(repo_path) else roots[0] / repo_path
    real = Path(os.path.realpath(joined))
    if not inside(real, roots):
        raise UserError(f"{repo_path!r} is outside the git roots ({', '.join(map(str, roots))}); refused.")
    if must_exist and not real.is_dir():
        raise UserError(f"{repo_path!r} is not a folder (looked for {real}).")
    return real


def git_dir(repo: Path, roots: list[Path]) -> Path:
    dot = repo / ".git"
    if dot.is_file():
        text = dot.read_text(errors="replace").strip()
        if not text.startswith("gitdir:"):
            raise UserError(f"{dot} is a file but not a 'gitdir:' pointer; refused.")
        target = Path(os.path.realpath(repo / text[len("gitdir:"):].strip()))
    elif dot.is_dir():
        target = Path(os.path.realpath(dot))
    else:
        raise UserError(f"{repo} is not a git repository (no .git); use operation 'init' or 'clone' to make one.")
    if not inside(target, roots):
        raise UserError(f"{repo}/.git points to {target}, outside the git roots; refused.")
    return target


def config_entries(gitdir: Path) -> list[tuple[str, str]]:
    """Keys and values of the repository's config files, read by git itself (reading runs nothing)."""
    entries = []
    for name in ("config", "config.worktree"):
        path = gitdir / name
        if not path.is_file():
            continue
        out = subprocess.run(["git", "config", "--file", str(path), "--list", "--null"], capture_output=True,
                             env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"},
                             timeout=20)
        if out.returncode != 0:
            raise UserError(f"{path} cannot be parsed by git ({out.stderr.decode(errors='replace').strip()}); refused.")
        for item in out.stdout.decode(errors="replace").split("\0"):
            if item:
                key, _, value = item.partition("\n")
                entries.append((key, value))
    return entries


def vet_config(gitdir: Path) -> list[tuple[str, str]]:
    entries = config_entries(gitdir)
    for key, _ in entries:
        if DANGEROUS_KEY.match(key.lower()):
            raise UserError(f"this repository's git config sets {key}, which can run a program or redirect git; "
                            f"persmem will not operate on it. If you trust it, remove the key "
                            f"(git config --unset {key}) yourself.")
    return entries


def remote_urls(entries: list[tuple[str, str]], name: str | None = None) -> list[str]:
    urls = []
    for key, value in entries:
        parts = key.split(".")
        if parts[0].lower() == "remote" and parts[-1].lower() in ("url", "pushurl") and (
                name is None or ".".join(parts[1:-1]) == name):
            urls.append(value)
    return urls

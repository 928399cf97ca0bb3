"""The project a session belongs to, from its working folder.

In order: the [sessions] projects map (the longest folder that contains the working folder wins), else the
name of the git repository's root folder (the nearest folder at or above holding `.git`), else the working
folder's own name. The result is normalised to a name the memory plugin takes as a project (1-64
characters) and that is safe as a folder name in the archive: lower case, any run of characters other than
a-z 0-9 . _ - becomes one "-", no leading or trailing "-" "." "_". Nothing left (no cwd, "/") is "general",
the memory plugin's default project.

The working folder is what a client says it is: any agent can send any path. So the server looks at its own
disk for the repository root only inside the [workspace] roots (the folders persmem's tools may touch anyway),
never above the root, and only where the folder really is inside one (links resolved). Elsewhere the project
comes from the words of the path alone, or from `repo`: the repository root the client's hook found on the
client's own disk (hook.py), taken only when it is the working folder or a folder above it. Either way, what a
caller gets back says nothing about the server's folders outside the roots.
"""

from __future__ import annotations

import os
import re
from pathlib import PurePosixPath

DEFAULT_PROJECT = "general"
MAX_PROJECT_CHARS = 64
_UNSAFE = re.compile(r"[^a-z0-9._-]+")


def normalise(name: str) -> str:
    """`name` as a project name (see the module's docstring)."""
    cleaned = _UNSAFE.sub("-", (name or "").strip().lower()).strip("-._")[:MAX_PROJECT_CHARS].strip("-._")
    return cleaned or DEFAULT_PROJECT


def _absolute(path: str) -> str | None:
    """`path` as a normal absolute path ("//x" is "/x"), or None when it is not one."""
    if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
        return None
    return "/" + os.path.normpath(path).lstrip("/")


def _inside(folder: str, root: str) -> bool:
    folder, root = folder.rstrip("/") or "/", root.rstrip("/") or "/"
    return folder == root or folder.startswith(root if root == "/" else root + "/")


def inside_roots(folder: str, roots) -> bool:
    """Whether `folder` is one of `roots` or inside one (compared by path components, not by prefix)."""
    return any(_inside(folder, root) for root in roots)


def git_root(cwd: str, stop: str = "/") -> str | None:
    """The nearest folder at or above `cwd`, and not above `stop`, that holds `.git` (a folder, or a file for
    worktrees). The hook calls it on the client's own disk; the server only inside a workspace root."""
    path = PurePosixPath(cwd)
    for folder in (path, *path.parents):
        if not _inside(str(folder), stop):
            return None
        try:
            if os.path.lexists(os.path.join(folder, ".git")):
                return str(folder)
        except (OSError, ValueError):
            return None
    return None


def _repository_in_roots(cwd: str, roots, private) -> str | None:
    """The repository root above `cwd` when `cwd` really is inside one of `roots` (links resolved: a link inside
    a root that leads out of it is outside), looked for up to that root; None otherwise, and for a folder in
    `private` (persmem's own files) that lies inside that root: never part of a workspace, as for the tools."""
    if not inside_roots(cwd, roots):
        return None  # never touch the disk for a folder outside the roots
    try:
        real = os.path.realpath(cwd)
    except (OSError, ValueError):
        return None
    holding = [root for root in roots if _inside(real, root)]
    if not holding:
        return None
    root = max(holding, key=len)
    if any(_inside(real, path) and _inside(path, root) for path in private):
        return None
    return git_root(real, stop=root)


def project_for(cwd: str, projects: dict[str, str] | None = None, roots=(), repo: str = "", private=()) -> str:
    """The project of a session started in `cwd` (an absolute path; anything else is "general"). `roots` are
    the [workspace] roots (resolved), `private` persmem's own folders in them; `repo` the repository root the
    client found above `cwd`, if any."""
    cwd = _absolute(cwd)
    if cwd is None:
        return DEFAULT_PROJECT
    mapped = [(len(root), name) for root, name in
              ((_absolute(os.path.expanduser(root)), name) for root, name in (projects or {}).items())
              if root is not None and _inside(cwd, root)]
    if mapped:
        return normalise(max(mapped)[1])
    repo = _absolute(repo) if repo else None
    if repo is not None and repo != "/" and _inside(cwd, repo):
        return normalise(PurePosixPath(repo).name)
    found = _repository_in_roots(cwd, [root for root in map(_absolute, roots) if root],
                                 [path for path in map(_absolute, private) if path])
    return normalise(PurePosixPath(found or cwd).name)

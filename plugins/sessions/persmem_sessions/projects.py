"""The project a session belongs to, from its working folder.

In order: the [sessions] projects map (the longest folder that contains the working folder wins), else the
name of the git repository's root folder (the nearest folder above holding `.git`), else the working
folder's own name. The result is normalised to a name the memory plugin takes as a project (1-64
characters) and that is safe as a folder name in the archive: lower case, any run of characters other than
a-z 0-9 . _ - becomes one "-", no leading or trailing "-" "." "_". Nothing left (no cwd, "/") is "general",
the memory plugin's default project.
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


def _inside(folder: str, root: str) -> bool:
    folder, root = folder.rstrip("/") or "/", root.rstrip("/") or "/"
    return folder == root or folder.startswith(root if root == "/" else root + "/")


def git_root(cwd: str) -> str | None:
    """The nearest folder at or above `cwd` that holds `.git` (a folder, or a file for worktrees)."""
    path = PurePosixPath(cwd)
    for folder in (path, *path.parents):
        try:
            if os.path.lexists(os.path.join(folder, ".git")):
                return str(folder)
        except (OSError, ValueError):
            return None
    return None


def project_for(cwd: str, projects: dict[str, str] | None = None) -> str:
    """The project of a session started in `cwd` (an absolute path; anything else is "general")."""
    if not cwd or not cwd.startswith("/") or "\0" in cwd:
        return DEFAULT_PROJECT
    cwd = os.path.normpath(cwd)
    roots = [(os.path.expanduser(root), name) for root, name in (projects or {}).items()]
    matches = [(len(os.path.normpath(root)), name) for root, name in roots
               if root.startswith("/") and _inside(cwd, os.path.normpath(root))]
    if matches:
        return normalise(max(matches)[1])
    root = git_root(cwd)
    return normalise(PurePosixPath(root or cwd).name)

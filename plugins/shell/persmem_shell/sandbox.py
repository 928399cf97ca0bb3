"""Path confinement for the shell and file tools.

A path is inside the workspace when its fully resolved form (every symlink followed, `..` applied) is one
of the roots or below one, compared component by component: root `/ws` does not contain `/ws-evil/x`.
Writes resolve the parent folder only and then replace the final name, so they never follow a symlink.

Some places are never inside the workspace, even under a root: the persmem home (agents, mail, memories)
and the config file. A root inside the home (the default, <home>/workspace) is still a workspace.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from persmem_core.sdk import UserError

NAME_MAX = 255  # bytes in one path component (Linux)
WORKSPACE_FOLDER_MODE = 0o755  # a folder file_write makes, as a shell with umask 022 would (file_write's files: 0644)
PATH_MAX = 4095  # bytes in a whole path


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


class Sandbox:
    def __init__(self, roots: list[Path], hidden: list[Path] = ()):
        self.roots = [Path(os.path.realpath(r)) for r in roots]  # host.workspace_roots() has refused /
        self.hidden = [Path(os.path.realpath(h)) for h in hidden]

    @property
    def home(self) -> Path:
        return self.roots[0]

    def describe(self) -> str:
        return ", ".join(str(r) for r in self.roots)

    def contains(self, real: Path) -> bool:
        """`real` is under a root, and not in a hidden place that lies inside that root."""
        return any(_inside(real, root) and not any(_inside(real, h) and _inside(h, root) for h in self.hidden)
                   for root in self.roots)

    def exposed(self) -> list[Path]:
        """Roots that have a hidden place inside them (only the OS sandbox can hide it from a command)."""
        return [root for root in self.roots if any(h != root and _inside(h, root) for h in self.hidden)]

    def lexical(self, path: str, base: Path | None = None) -> Path:
        """The path joined to `base` (default: the first root) and normalized, symlinks not followed."""
        if not isinstance(path, str):
            raise UserError("path must be a string.")
        if "\x00" in path:
            raise UserError("path contains a NUL byte; pass a plain file path.")
        if not path.strip():
            raise UserError(f"path is empty; pass a path inside the workspace ({self.describe()}).")
        if path.startswith("~"):
            raise UserError(f"{path!r}: '~' is not expanded; pass a path inside the workspace ({self.describe()}).")
        check_length(path)
        joined = Path(path) if os.path.isabs(path) else (base or self.home) / path
        return Path(os.path.normpath(joined))

    def _outside(self, path: str) -> UserError:
        return UserError(f"{path!r} is outside the workspace; allowed folders: {self.describe()} "
                         "(symbolic links are followed before this check; persmem's own data folder is never "
                         "part of the workspace).")

    def resolve(self, path: str, base: Path | None = None) -> Path:
        """For reading and for commands: the real path, which must be inside a root."""
        real = real_path(self.lexical(path, base))
        if not self.contains(real):
            raise self._outside(path)
        return real

    def for_write(self, path: str, base: Path | None = None) -> Path:
        """For writing: the real parent folder (inside a root) joined with the final name, which is replaced
        and never followed if it is a symlink."""
        lex = self.lexical(path, base)
        parent = real_path(lex.parent)
        if not self.contains(parent) or lex.name in ("", ".", ".."):
            raise self._outside(path)
        target = parent / lex.name
        if target == parent or not self.contains(target):
            raise self._outside(path)
        return target

    def open_folder(self, real: Path, path: str, create: bool = False) -> int:
        """A file descriptor of the folder `real` (resolved and checked), opened one name at a time from its
        root without following links: if a folder on the way was swapped for a symlink after the check, the
        open fails instead of leaving the workspace. With `create`, missing folders are made on the way."""
        root = max((r for r in self.roots if _inside(real, r)), key=lambda r: len(r.parts), default=None)
        if root is None:
            raise self._outside(path)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for name in real.relative_to(root).parts:
                try:
                    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise UserError(f"folder {real} does not exist; pass mkdir=true to create it.") from None
                    os.mkdir(name, dir_fd=fd)
                    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                    os.fchmod(child, WORKSPACE_FOLDER_MODE)  # the user's modes, not persmem's private umask
                except OSError as exc:
                    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    raise UserError(f"{path!r}: {name!r} is not a folder, or was swapped for a link while it was "
                                    "being opened; refused.") from None
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_regular(self, path: str) -> tuple[int, Path]:
        """Open an existing regular file for reading; FIFOs, devices and folders are refused, never waited on.
        Opened relative to its folder's descriptor, never through a link (see open_folder)."""
        real = self.resolve(path)
        if real in self.roots:
            raise UserError(f"{path!r} is a folder; shell_exec with `ls` lists it.")
        folder = self.open_folder(real.parent, path)
        try:
            fd = os.open(real.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        except FileNotFoundError:
            raise UserError(f"{path!r} does not exist (looked for {real}).") from None
        except IsADirectoryError:
            raise UserError(f"{path!r} is a folder; shell_exec with `ls` lists it.") from None
        except PermissionError:
            raise UserError(f"{path!r}: permission denied.") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UserError(f"{path!r} was swapped for a link while it was being opened; refused.") from None
            raise UserError(f"{path!r} cannot be opened: {exc.strerror}.") from None
        finally:
            os.close(folder)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
            raise UserError(f"{path!r} is {kind}, not a regular file; refused.")
        return fd, real


def real_path(path: Path) -> Path:
    """`path` with every link followed; a link changing while it is read is a clear refusal, not a crash."""
    try:
        return Path(os.path.realpath(path))
    except OSError as exc:
        raise UserError(f"{str(path)[:300]!r} changed while it was being resolved ({exc.strerror}); refused, "
                        "try again.") from None


def git_folder(real: Path, sandbox: Sandbox) -> Path | None:
    """The git folder `real` is in or is (a `.git`, or a folder git would take for a repository: HEAD, objects
    and refs), looked for up to the workspace root; None if it is not in one. git_op vets a repository's
    config just before git reads it, so nothing else may change git's own files in between."""
    roots = [root for root in sandbox.roots if _inside(real, root)]
    folder = real
    while True:
        try:
            looks_like_git = folder.name == ".git" or (folder.is_dir() and (folder / "HEAD").is_file() and (
                (folder / "commondir").is_file()  # a linked worktree's git folder
                or ((folder / "objects").is_dir() and (folder / "refs").is_dir())))
        except OSError:  # a name too long, a folder we may not read: not a git folder we could use
            looks_like_git = False
        if looks_like_git:
            return folder
        if folder in roots or folder.parent == folder:
            return None
        folder = folder.parent


def refuse_git_folder(real: Path, sandbox: Sandbox, path: str) -> None:
    folder = git_folder(real, sandbox)
    if folder is not None:
        raise UserError(f"{path!r} is inside the git folder {folder}; only git_op changes git's own files "
                        "(status, add, commit, branch...), so that a repository's config cannot change between "
                        "the check of git_op and git reading it.")


def check_length(path: str) -> None:
    """Refuse names the file system would refuse (ENAMETOOLONG), naming the limit."""
    encoded = path.encode("utf-8", "surrogateescape")
    if len(encoded) > PATH_MAX:
        raise UserError(f"path is {len(encoded):,} bytes long; the limit is {PATH_MAX:,} bytes. Use a shorter path.")
    for part in encoded.split(b"/"):
        if len(part) > NAME_MAX:
            raise UserError(f"a name in the path is {len(part)} bytes long ({part[:40].decode('utf-8', 'replace')}"
                            f"...); file names are at most {NAME_MAX} bytes. Use a shorter name.")

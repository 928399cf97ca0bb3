"""Durable file writes, for the core and for plugins.

`rename` alone is atomic but not durable: the new name can vanish in a
crash. The sequence here (temp file in the same folder, fsync, rename,
fsync the folder) is what makes a write that returned survive power loss.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
from pathlib import Path
from typing import BinaryIO

TEMP_NAME = re.compile(r"\.persmem-[0-9a-f]{12}\.tmp")  # what atomic_write_at names its temp file
PRIVATE_UMASK = 0o077  # what persmem creates is its user's alone: files 0600, folders 0700
_launch_umask: int | None = None  # the umask the process had before use_private_umask (None: never called)


def use_private_umask() -> None:
    """From now on everything this process creates (files, folders, index files a library writes, the files of the
    programs it starts for itself) is readable by its user alone: umask 077. Every `persmem` command calls this
    before it touches the home, so no writer has to remember a mode. The umask the process was started with is
    kept for the commands a tool runs in the workspace (`launch_umask`): those files are the user's."""
    global _launch_umask
    previous = os.umask(PRIVATE_UMASK)
    if _launch_umask is None:
        _launch_umask = previous


def launch_umask() -> int:
    """The umask this process was started with, for the programs tools run in the workspace (shell, git): what
    they create there gets the modes the user's own shell would give. -1 (leave as it is) before
    use_private_umask was called."""
    return -1 if _launch_umask is None else _launch_umask


def create_private(path: Path) -> None:
    """Create the empty file `path` (0600, not following a link; an existing file is kept) for a library that
    then writes it by name (hnswlib's save_index): the file's mode is ours, whatever the library passes."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))


def open_private(path: Path, mode: str = "wb"):
    """`open(path, mode)` for writing a new or truncated file that only its user may read (0600 from the start;
    a link at `path` is refused, never followed)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_APPEND if "a" in mode else os.O_TRUNC
    if "+" in mode:
        flags = (flags & ~os.O_WRONLY) | os.O_RDWR
    fd = os.open(path, flags, 0o600)
    try:
        os.fchmod(fd, 0o600)  # a file that was there keeps its mode otherwise
        return os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        raise


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of `data` to `fd`: a short write is followed by the rest, or by the error that stopped it (ENOSPC);
    a write that makes no progress is an EIO instead of a loop that never ends."""
    view = memoryview(data)
    while view:
        done = os.write(fd, view)
        if done == 0:
            raise OSError(errno.EIO, "a write made no progress")
        view = view[done:]


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` so that readers see the old or the new
    content, never a mix, and the new content survives a crash once this
    returns. Never follows a symlink at `path`: the link itself is replaced."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        atomic_write_at(folder, path.name, data, mode)
    finally:
        os.close(folder)


def atomic_write_at(folder: int, name: str, data: bytes, mode: int = 0o600) -> None:
    """`atomic_write_bytes` for the file `name` in the open folder `folder` (a descriptor): no path is looked
    up again, so a folder swapped for a link after it was opened cannot move the write elsewhere. The temp
    name is short, so any `name` the file system takes fits."""
    tmp = f".persmem-{secrets.token_hex(6)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.rename(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=folder)
        raise
    os.fsync(folder)


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of a file, read in 1 MB blocks (for checking a model or an index against its record)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class HashingReader:
    """A file's reader that hashes what passes through it, so a file can be checked against its recorded
    SHA-256 in the same pass that reads it (a 1.7 GB index is read once, not twice)."""

    def __init__(self, f: BinaryIO):
        self.f, self.digest = f, hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        block = self.f.read(size)
        self.digest.update(block)
        return block

    def hexdigest_to_end(self) -> str:
        """The hex SHA-256 of the whole file: what was read so far and the rest of it."""
        while self.read(1 << 20):
            pass
        return self.digest.hexdigest()


def remove_leftover_temps(root: Path, skip: list[Path]) -> int:
    """Delete the temp files of atomic writes that were killed before their rename, under `root` but not under
    `skip`; returns how many. They may hold what was being written (plaintext, before a home was sealed). Only
    safe while no process writes under `root` (the owner lock held)."""
    skipped = {os.path.realpath(path) for path in skip}
    removed = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.realpath(os.path.join(folder, d)) not in skipped]
        for name in files:
            if TEMP_NAME.fullmatch(name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))
                    removed += 1
    return removed

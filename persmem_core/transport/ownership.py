"""Which process owns a persmem home, and where the others reach it.

One process at a time serves a home: it holds the owner lock (`<home>/.owner.lock`, an flock the kernel
drops when the process dies, however it dies) and listens on the home's local socket. Every other local
client (stdio sessions of Claude Code or Codex, a second `persmem serve`) talks to the owner over that
socket instead of opening the data itself: two processes never write one store.

The socket is `<home>/persmem.sock`, mode 0600, so only the home's own user can connect (the same user can
read the data folder directly anyway). A home whose path is too long for a unix socket name (108 bytes)
gets its socket in a private runtime folder instead (`$XDG_RUNTIME_DIR`, else `/tmp/persmem-<uid>`, which
must be ours and 0700), named by a hash of the home. Where it is, a fact of the home's layout, is
`persmem_core.paths.socket_path`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import stat
import struct
import time
from pathlib import Path

from persmem_core.errors import UserError

LOCK_NAME = ".owner.lock"


class OwnerLock:
    """The home's owner lock. `acquire()` does not wait; `wait(timeout)` does."""

    def __init__(self, home: Path):
        self.home = Path(home)
        self.path = self.home / LOCK_NAME
        self._file = None

    def acquire(self) -> bool:
        """Take the lock if nobody holds it; True when this process now owns the home."""
        if self._file is not None:
            return True
        self.home.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._file = fd
        return True

    def wait(self, timeout: float) -> bool:
        """Take the lock, waiting up to `timeout` seconds for its holder to let go."""
        deadline = time.monotonic() + timeout
        while not self.acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            os.close(self._file)
            self._file = None


def check_private_home(home: Path) -> None:
    """A home others can write to would let them plant a socket (or a link) where local clients look for the owner:
    refused, naming the fix."""
    try:
        info = os.stat(home)
    except FileNotFoundError:
        return
    # Writable by others, or by a group that is not this user's own (umask 002 gives the user's private group
    # write access, which lets in nobody else), is refused.
    group_writable = info.st_mode & 0o020 and info.st_gid != os.getgid()
    if info.st_uid != os.getuid() or info.st_mode & 0o002 or group_writable:
        mode = stat.S_IMODE(info.st_mode)
        raise UserError(f"{home} is not this user's alone (owner uid {info.st_uid}, mode {mode:o}): "
                        f"others could plant a fake server there. Run `chmod go-w {home}` (as its owner), or use "
                        "another PERSMEM_HOME.")


def owner_pid(home: Path) -> int | None:
    """The pid the lock holder wrote into the lock file (only the holder writes it, and only we can: 0600)."""
    try:
        text = (Path(home) / LOCK_NAME).read_text()
        return int(text) if text.strip().isdigit() else None
    except OSError:
        return None


def answers_for_owner(home: Path, path: Path) -> bool:
    """Whether the socket at `path` is the owner's: a socket file of ours (not a link), listened on by the process
    that holds the lock, as this user. A process that binds the path without the lock, another user's socket, or
    a link to one, is not the owner, whatever it answers."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        try:
            probe.connect(os.fspath(path))
            pid, uid, _ = struct.unpack("3i", probe.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        except OSError:
            return False
    return uid == os.getuid() and pid == owner_pid(home)


def bind_private_socket(path: Path) -> socket.socket:
    """A listening unix socket at `path`, 0600 from the start (never a moment when others could connect).
    Only the lock holder calls this, so a file of ours already there is a dead owner's (or a link planted: removed,
    never followed) and is replaced; one of another user is refused: it has no business in our folder."""
    with contextlib.suppress(FileNotFoundError):
        info = os.lstat(path)
        if info.st_uid != os.getuid():
            raise UserError(f"{path} belongs to another user (uid {info.st_uid}), who may be waiting there for "
                            "persmem's clients: persmem will not listen there. Remove it (as root), then start again.")
        if not stat.S_ISDIR(info.st_mode):  # a dead owner's socket, or a link planted there: gone
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)
    try:
        sock.bind(os.fspath(path))
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot create the local socket {path}: {exc.strerror}. Check that the folder is "
                        "yours and writable, or remove what is in the way.") from None
    finally:
        os.umask(previous)
    os.chmod(path, 0o600)
    sock.listen(128)
    sock.setblocking(False)
    return sock

"""Where persmem keeps its config and data.

`$PERSMEM_HOME` if set, else `$XDG_DATA_HOME/persmem`, else
`~/.local/share/persmem`. The config file is `$PERSMEM_CONFIG` if set, else
`persmem.toml` inside the home. Each plugin owns one folder in the home. The home's owner listens on
`socket_path(home)`: `<home>/persmem.sock`, or, for a home whose path is too long for a unix socket name, a socket
named by a hash of the home in a private runtime folder (transport/ownership.py says who owns a home).

The home is its user's alone: 0700, every file in it 0600 (0700 if executable), every folder 0700, whether
encryption is on or not. `persmem` creates everything under umask 077 (fileio.use_private_umask), and the process
that takes the home tightens, with a log line, a home an older version left open to others and everything in it
(`secure_home`). The workspace roots are left alone: the files there are the user's.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from persmem_core.errors import UserError

log = logging.getLogger("persmem")
OPEN_TO_OTHERS = 0o077  # mode bits that let the group or anyone else in


def home_dir(environ: dict[str, str] | os._Environ[str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("PERSMEM_HOME"):
        return Path(env["PERSMEM_HOME"]).expanduser()
    xdg = env.get("XDG_DATA_HOME") or str(Path("~/.local/share").expanduser())
    return Path(xdg).expanduser() / "persmem"


def config_path(environ: dict[str, str] | os._Environ[str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("PERSMEM_CONFIG"):
        return Path(env["PERSMEM_CONFIG"]).expanduser()
    return home_dir(env) / "persmem.toml"


SOCKET_NAME = "persmem.sock"
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes with the NUL; keep a margin


def socket_path(home: Path) -> Path:
    """Where the owner of `home` listens (the same answer in every process)."""
    home = Path(os.path.abspath(home))
    path = home / SOCKET_NAME
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:20]
    return _runtime_dir() / f"persmem-{digest}.sock"


def _runtime_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR")
    folder = Path(base) if base and os.path.isdir(base) else Path(f"/tmp/persmem-{os.getuid()}")
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise UserError(f"{folder} is not a private folder of this user (it must be ours and mode 0700); "
                        "persmem will not put its socket there. Remove it, or use a shorter PERSMEM_HOME.")
    return folder


@dataclass
class Tightened:
    """What `secure_home` changed: the home's own mode before (None: already private, or made now), how many files
    and folders under it lost their group and other bits, and what could not be changed (not ours, or refused)."""

    home_mode: int | None = None
    files: int = 0
    folders: int = 0
    left: list[str] = field(default_factory=list)

    def lines(self, home: Path) -> list[str]:
        """What it did, for the log (nothing when nothing was open to others)."""
        said = []
        if self.home_mode is not None:
            said.append(f"persmem home {home} was mode {self.home_mode:04o}, open to others: now 0700")
        if self.files or self.folders:
            said.append(f"{self.files} file(s) and {self.folders} folder(s) in {home} were open to others: "
                        "now 0600 / 0700 (this user's only)")
        return said

    def warning(self, home: Path) -> str | None:
        """What stays open to others, for the log."""
        if not self.left:
            return None
        return (f"{len(self.left)} path(s) in {home} stay open to others (not this user's, or the change was "
                f"refused), e.g. {self.left[0]}: chown or chmod them, or move them out of the home")


def secure_home(home: Path, skip: Iterable[Path] = ()) -> Tightened:
    """Make `home` this user's alone: created 0700, or its mode tightened to 0700. A home that was open to others
    (made by an older version, or under a looser umask) is then walked: every file and folder in it that the group
    or others may read, write or enter loses those bits (files keep their owner's bits: 0644 -> 0600, 0755 ->
    0700). A home that is 0700 already is not walked (nobody else can reach into it, and since this version
    everything in it is made 0600 / 0700): a start costs one stat, not a walk over every mail and session file.
    Links are not followed, nothing under `skip` (the workspace roots: the user's files) is touched, and nothing
    outside the home. A home that holds this user's whole home folder (PERSMEM_HOME=~) is only made 0700 itself:
    its other contents are the user's, not persmem's. Logs what it changed."""
    home = Path(home)
    done = Tightened()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.stat(home)
    if stat.S_IMODE(info.st_mode) & OPEN_TO_OTHERS:
        if info.st_uid == os.getuid():
            os.chmod(home, 0o700)
            done.home_mode = stat.S_IMODE(info.st_mode)
        else:
            done.left.append(str(home))
    real_home = os.path.realpath(home)
    user_home = os.path.realpath(os.path.expanduser("~"))
    holds_user_home = user_home == real_home or user_home.startswith(real_home.rstrip(os.sep) + os.sep)
    if done.home_mode is not None and not holds_user_home:
        _tighten_tree(real_home, {os.path.realpath(path) for path in skip}, done)
    for line in done.lines(home):
        log.info("%s", line)
    if done.warning(home):
        log.warning("%s", done.warning(home))
    return done


def _tighten_tree(root: str, skip: set[str], done: Tightened) -> None:
    uid = os.getuid()
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:  # gone meanwhile, or not ours to read: its mode says so below
            continue
        for entry in entries:
            if entry.path in skip:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir = stat.S_ISDIR(info.st_mode)
            if is_dir:
                pending.append(entry.path)
            elif not stat.S_ISREG(info.st_mode) and not stat.S_ISSOCK(info.st_mode):
                continue  # a link (never followed), a FIFO, a device: not persmem's
            mode = stat.S_IMODE(info.st_mode)
            if not mode & OPEN_TO_OTHERS:
                continue
            if info.st_uid != uid:
                done.left.append(entry.path)
                continue
            if not _tighten(entry.path, info, uid):
                done.left.append(entry.path)
                continue
            if is_dir:
                done.folders += 1
            else:
                done.files += 1


def _tighten(path: str, seen: os.stat_result, uid: int) -> bool:
    """Drop the group and other bits of the file or folder `path` (as `seen` by lstat), through a descriptor opened
    without following a link, and only if it is still that same file of ours. False when it could not be done."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        if not stat.S_ISSOCK(seen.st_mode):
            return False
        try:  # a socket cannot be opened; its mode is set by path (lstat just said it is no link)
            os.chmod(path, stat.S_IMODE(seen.st_mode) & ~OPEN_TO_OTHERS)
            return True
        except OSError:
            return False
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino) or now.st_uid != uid:
            return False
        os.fchmod(fd, stat.S_IMODE(now.st_mode) & ~OPEN_TO_OTHERS)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)

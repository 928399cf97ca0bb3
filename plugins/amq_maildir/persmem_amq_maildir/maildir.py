"""One agent's Maildir inbox, with the guarantees qmail and Dovecot rely on.

Layout (persMEM's): `<root>/<agent>/inbox/{tmp,new,cur}`; persmem adds `<root>/<agent>/quarantine/`
for files that are not messages.

- deliver: write `tmp/<name>` (O_EXCL, never through a symlink), fsync it, `link` it to `new/<name>`
  (fails rather than clobber), unlink the tmp name, fsync `new/`. Only then is the send acknowledged, so
  an acknowledged message survives kill -9 and power loss, and `new/` never shows a partial file.
- claim: rename `new/<name>` -> `cur/<name>`; of several readers exactly one wins, the others get ENOENT.
- listings never read `tmp/`; a name that vanishes between readdir and open moved to `cur/` (or was
  quarantined) and is looked up again, not reported as an error.
- anything in `new/` or `cur/` that is not a readable message (symlink, FIFO, folder, oversized,
  unparseable) is moved to `quarantine/` and reported; it never breaks a listing.
- `clean_tmp` removes interrupted deliveries older than the configured age (36 hours, as Maildir says).
- a message file may be sealed (`[amq] encrypt`: persmem_core.sdk.Sealer, purpose b"amq.message"); reading opens
  either kind. A sealed file that does not open (its key is not on hand, or it was changed) is a SealingError
  naming the file and the fix, never a malformed file to quarantine: moving it aside would hide a wrong key.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from persmem_core.sdk import Sealer, SealingError, fsync_dir, is_sealed, write_all

from .message import SUFFIX, MalformedMessage, Message, decode

log = logging.getLogger("persmem.amq")

SUBDIRS = ("tmp", "new", "cur")
PURPOSE = b"amq.message"  # what a sealed message file is sealed as


class DeliveryError(OSError):
    """A delivery did not complete; nothing was made visible."""


@dataclass(frozen=True)
class Entry:
    """A message as listed: where it is and what it says."""

    name: str  # file name, `<id>.md`
    folder: str  # "new" (unread) or "cur" (read)
    message: Message

    @property
    def id(self) -> str:
        return self.name[: -len(SUFFIX)]


@dataclass(frozen=True)
class Quarantined:
    name: str
    folder: str
    reason: str


class Mailbox:
    """The inbox of one agent. Thread-safe; several processes may share the folder. `sealer` gives the Sealer
    that opens sealed message files (asked only when one is met); None: a sealed file can not be opened."""

    def __init__(self, folder: Path, max_file_bytes: int, sealer: Callable[[], Sealer] | None = None):
        self.folder = folder
        self._sealer = sealer
        self.inbox = folder / "inbox"
        self.quarantine_dir = folder / "quarantine"
        self.max_file_bytes = max_file_bytes
        self._cache: dict[tuple[str, str], tuple[tuple[int, int, int], Message]] = {}
        self._lock = threading.Lock()
        self._ready = False

    # -- creation --------------------------------------------------------------------------------------
    def exists(self) -> bool:
        return (self.inbox / "new").is_dir()

    def ensure(self) -> None:
        """Create the folders (on first delivery or first look); durable before any message goes in."""
        if self._ready:
            return
        created = []
        for path in (self.folder, self.inbox, *(self.inbox / sub for sub in SUBDIRS)):
            try:
                path.mkdir(mode=0o700)
                created.append(path)
            except FileExistsError:
                if path.is_symlink() or not path.is_dir():
                    raise DeliveryError(errno.ENOTDIR, f"{path} is not a folder; move it away") from None
        for path in created:
            fsync_dir(path.parent)
        self._ready = True

    # -- delivery --------------------------------------------------------------------------------------
    def deliver(self, name: str, data: bytes) -> None:
        """Deliver `data` as `new/<name>`; returns only once it is durable. Raises FileExistsError if the
        name is taken (the caller picks a new one) and OSError/DeliveryError if anything failed, in which
        case nothing is visible in `new/`."""
        self.ensure()
        tmp = self.inbox / "tmp" / name
        new = self.inbox / "new" / name
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o600)
        except FileNotFoundError:  # the mailbox was removed while we ran: make it again
            self._ready = False
            self.ensure()
            fd = os.open(tmp, flags, 0o600)
        linked = False
        try:
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.link(tmp, new)  # EEXIST instead of clobbering
            linked = True
            fsync_dir(new.parent)
        except BaseException:
            if linked:  # the directory sync failed: take the message back, the send is not acknowledged
                _unlink_quietly(new)
            _unlink_quietly(tmp)
            raise
        _unlink_quietly(tmp)

    # -- reading ---------------------------------------------------------------------------------------
    def names(self, folder: str) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.inbox / folder) if n.endswith(SUFFIX) and not n.startswith("."))
        except FileNotFoundError:
            return []

    def load(self, folder: str, name: str) -> Message:
        """Read and parse one file. FileNotFoundError if it is gone; MalformedMessage if it is not a
        message (the caller quarantines it)."""
        path = self.inbox / folder / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise MalformedMessage("a symbolic link, not a file") from None
            if exc.errno in (errno.ENXIO, errno.EISDIR):
                raise MalformedMessage("not a regular file") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise MalformedMessage("not a regular file")
            if st.st_size > self.max_file_bytes:
                raise MalformedMessage(f"{st.st_size} bytes, over [amq] max_file_bytes = {self.max_file_bytes}")
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            cached = self._cache.get((folder, name))
            if cached and cached[0] == key:
                return cached[1]
            data = os.read(fd, st.st_size + 1)
            while len(data) <= st.st_size:
                more = os.read(fd, st.st_size + 1 - len(data))
                if not more:
                    break
                data += more
        finally:
            os.close(fd)
        message = decode(self.open_sealed(path, data) if is_sealed(data) else data)
        with self._lock:
            self._cache[(folder, name)] = (key, message)
        return message

    def open_sealed(self, path: Path, data: bytes) -> bytes:
        """The plaintext of a sealed message file; SealingError naming `path` when it does not open."""
        sealer = self._sealer() if self._sealer is not None else Sealer.plain()
        try:
            return sealer.open(data, PURPOSE)
        except SealingError as exc:
            raise SealingError(f"the sealed message {path}: {exc}") from exc

    def scan(self, folders=("new", "cur")) -> tuple[list[Entry], list[Quarantined]]:
        """Every message in `folders`; malformed files are quarantined and returned as the second list.

        Delivered files never change (Maildir: write once, then only renamed), so a name already parsed
        is served from the cache without opening the file again; `get` (used to read a body) re-checks."""
        entries: list[Entry] = []
        bad: list[Quarantined] = []
        seen: set[str] = set()
        live: set[tuple[str, str]] = set()
        for folder in folders:
            for name in self.names(folder):
                if name in seen:
                    continue
                cached = self._cache.get((folder, name))
                entry = Entry(name, folder, cached[1]) if cached else self._entry(folder, name, bad)
                if entry is not None:
                    seen.add(name)
                    entries.append(entry)
                    live.add((entry.folder, name))
        if len(self._cache) > len(live) + 64:  # forget files that are gone
            with self._lock:
                for key in [k for k in self._cache if k not in live and k[0] in folders]:
                    del self._cache[key]
        return entries, bad

    def get(self, name: str) -> Entry | None:
        """The message called `name` in new/ or cur/, or None."""
        bad: list[Quarantined] = []
        for folder in ("new", "cur"):
            if os.path.lexists(self.inbox / folder / name):
                entry = self._entry(folder, name, bad)
                if entry is not None:
                    return entry
        return None

    def _entry(self, folder: str, name: str, bad: list[Quarantined]) -> Entry | None:
        for _ in range(3):  # a reader may move it new -> cur under us; look again where it went
            try:
                return Entry(name, folder, self.load(folder, name))
            except FileNotFoundError:
                if folder == "new" and os.path.lexists(self.inbox / "cur" / name):
                    folder = "cur"
                    continue
                return None
            except MalformedMessage as exc:
                if self.quarantine(folder, name, str(exc)):
                    bad.append(Quarantined(name, folder, str(exc)))
                return None
            except OSError as exc:  # unreadable (permissions, I/O error): report, do not crash the listing
                log.warning("amq: cannot read %s/%s in %s: %s", folder, name, self.folder.name, exc)
                bad.append(Quarantined(name, folder, f"unreadable: {exc.strerror}"))
                return None
        return None

    def unread_count(self) -> int:
        return len(self.names("new"))

    # -- claiming --------------------------------------------------------------------------------------
    def claim(self, name: str) -> bool:
        """Move `new/<name>` to `cur/<name>`. True for the one caller that moved it, False if it was not in
        new/ (already claimed by another reader, or never there)."""
        self.ensure()
        try:
            os.rename(self.inbox / "new" / name, self.inbox / "cur" / name)
        except FileNotFoundError:
            return False
        fsync_dir(self.inbox / "cur")
        fsync_dir(self.inbox / "new")
        with self._lock:
            cached = self._cache.pop(("new", name), None)
            if cached:
                self._cache[("cur", name)] = cached
        return True

    # -- housekeeping ----------------------------------------------------------------------------------
    def quarantine(self, folder: str, name: str, reason: str) -> bool:
        """Move a bad file out of the inbox; True if this call moved it."""
        try:
            self.quarantine_dir.mkdir(mode=0o700, exist_ok=True)
            target = self.quarantine_dir / f"{folder}-{name}"
            if os.path.lexists(target):
                target = self.quarantine_dir / f"{folder}-{name}.{time.time_ns()}"
            os.rename(self.inbox / folder / name, target)
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.error("amq: cannot quarantine %s/%s in %s: %s", folder, name, self.folder.name, exc)
            return False
        log.warning("amq: quarantined %s/%s in %s: %s", folder, name, self.folder.name, reason)
        with self._lock:
            self._cache.pop((folder, name), None)
        return True

    def quarantined(self) -> list[str]:
        try:
            return sorted(os.listdir(self.quarantine_dir))
        except FileNotFoundError:
            return []

    def clean_tmp(self, max_age_seconds: float) -> int:
        """Remove files in tmp/ older than `max_age_seconds` (deliveries that were interrupted)."""
        removed = 0
        cutoff = time.time() - max_age_seconds
        try:
            names = os.listdir(self.inbox / "tmp")
        except FileNotFoundError:
            return 0
        for name in names:
            path = self.inbox / "tmp" / name
            try:
                st = os.lstat(path)
                if st.st_mtime < cutoff and not stat.S_ISDIR(st.st_mode):
                    os.unlink(path)
                    removed += 1
            except FileNotFoundError:
                continue
        return removed

    def tmp_count(self) -> int:
        try:
            return len(os.listdir(self.inbox / "tmp"))
        except FileNotFoundError:
            return 0


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass

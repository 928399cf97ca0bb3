"""`persmem key migrate|rotate` for mail: every delivered message file brought to the state [amq] asks for.

The target: sealed under the current key when `[amq] encrypt` is on and the home's Sealer is enabled;
persMEM's plain format otherwise. Each message file in new/ and cur/ that is not in the target state is
rewritten in place, atomically: its new bytes are written to the mailbox's tmp/ (0600, fsynced, the original's
times kept), then renamed over the same name in the same folder; each folder is fsynced before this returns.
A kill -9 at any moment leaves each file either as it was or rewritten, both readable with the keys on hand;
running it again finishes the job.

It runs with no server (the caller holds the home's owner lock). That matters: a server's reader claims a
message by renaming new/<name> to cur/<name>, and a rename over new/<name> racing that claim would put a second
copy back in new/. The `persmem amq` commands do not claim (`send` only adds new names; `peek` reads), so they
may run meanwhile. Files in tmp/ (interrupted deliveries, removed after [amq] tmp_max_age_hours) and in
quarantine/ (not messages) are left as they are.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from persmem_core.sdk import ResealReport, Sealer, SealingError, fsync_dir, is_sealed

from .config import AmqConfig
from .maildir import PURPOSE, Mailbox
from .store import MailStore

FOLDERS = ("new", "cur")


def _read_message_file(path: Path) -> tuple[bytes, os.stat_result] | None:
    """The bytes of a regular file (None for a link, FIFO, folder, or a file that is gone)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO, errno.EISDIR):
            return None
        raise
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        return f.read(), info


def _replace(box: Mailbox, folder: str, name: str, data: bytes, info: os.stat_result) -> None:
    """Write `data` to tmp/ and rename it over <folder>/<name> (the caller fsyncs the folder)."""
    tmp = box.inbox / "tmp" / f"reseal.{os.getpid()}.{name}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # left by a run that was killed
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.utime(tmp, ns=(info.st_atime_ns, info.st_mtime_ns))  # listings and mail tools may go by the time
        os.rename(tmp, box.inbox / folder / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def reseal_mail(root: Path, config: AmqConfig, sealer: Sealer, progress: Callable[[str, int, int], None],
                dry_run: bool) -> ResealReport:
    """Reseal every message file under the mail root `root` (see the module's docstring)."""
    report = ResealReport(what="mail")
    target = sealer if config.encrypt and sealer.enabled else None
    store = MailStore(root, config, sealer=lambda: sealer)
    files = [(store.box(agent), folder, name) for agent in store.on_disk() for folder in FOLDERS
             for name in store.box(agent).names(folder)]
    progress("mail", 0, len(files))
    touched: set[Path] = set()
    for done, (box, folder, name) in enumerate(files, 1):
        found = _read_message_file(box.inbox / folder / name)
        if found is not None:
            data, info = found
            report.checked += 1
            report.plain += not is_sealed(data)
            if sealer.needs_reseal(data) if target else is_sealed(data):
                report.rewritten += 1
                if not dry_run:
                    try:
                        plain = sealer.open(data, PURPOSE)
                    except SealingError as exc:
                        raise SealingError(f"the sealed message {box.inbox / folder / name}: {exc}") from exc
                    _replace(box, folder, name, target.seal(plain, PURPOSE) if target else plain, info)
                    touched.add(box.inbox / folder)
        progress("mail", done, len(files))
    for folder in sorted(touched):
        fsync_dir(folder)
    return report

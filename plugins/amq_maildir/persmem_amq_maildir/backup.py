"""Backups of the mail root: every delivered message (new/ and cur/), in the same layout.

Message files never change once delivered; they only move from new/ to cur/. A file that moves while we
copy is looked for in the other folder, so each message is copied once, to where it was last seen.
A backup holds everyone's mail, so it is the owner's alone whatever the modes of the originals: folders
0700 and files 0600 from creation (a copy keeps the message's times, never its mode). `restore_mail` puts a
backup back into an empty mail root, for `persmem restore`.

With a mail backend in use (the `amq_backend` hook), `backup_backend` writes the backend's mail in the same
layout, byte for byte (sealed stays sealed), so a backup reads the same whichever backend kept the mail; it is
restored into the Maildir root, and `persmem amq migrate` moves it into the backend again.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from persmem_core.sdk import NAME_RE

from .message import SUFFIX


def backup_mail(root: Path, dest: Path) -> None:
    if not root.exists():
        return
    for agent in sorted(os.listdir(root)):
        inbox = root / agent / "inbox"
        if not NAME_RE.match(agent) or not inbox.is_dir():
            continue
        for folder in (dest / agent, dest / agent / "inbox"):
            folder.mkdir(mode=0o700, exist_ok=True)
        for sub in ("tmp", "new", "cur"):
            (dest / agent / "inbox" / sub).mkdir(mode=0o700)
        for folder, other in (("new", "cur"), ("cur", "new")):
            for name in sorted(os.listdir(inbox / folder)):
                if not name.endswith(SUFFIX) or (dest / agent / "inbox" / other / name).exists():
                    continue
                for where in (folder, other):
                    source = inbox / where / name
                    if source.is_symlink() or not source.is_file():
                        break
                    try:
                        _copy_private(source, dest / agent / "inbox" / where / name)
                        break
                    except FileNotFoundError:
                        continue


def _copy_private(source: Path, target: Path) -> None:
    with open(source, "rb") as src:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(src, dst)
        st = os.fstat(src.fileno())
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def restore_mail(root: Path, src: Path) -> list[str]:
    """Put a backup's mailboxes into an empty mail root, each message where the backup saw it last (new/ unread,
    cur/ read), times kept, private from creation. Returns the mailboxes restored."""
    from persmem_core.sdk import UserError

    if root.exists() and any(root.iterdir()):
        raise UserError(f"the mail root {root} already holds mail or other files; restore only into an empty one "
                        "(move it aside, or point [amq] root or PERSMEM_HOME to a new folder).")
    agents = sorted(name for name in os.listdir(src) if NAME_RE.match(name) and (src / name / "inbox").is_dir())
    # A backup holds real folders only: a link would copy whatever mail folder it names (another user's inbox)
    # into this root, where agents read it. (Message files that are links are skipped below, as backup does.)
    for agent in agents:
        kept = src / agent / "inbox"
        for folder in (src, src / agent, kept, kept / "new", kept / "cur"):
            if folder.is_symlink():
                raise UserError(f"{folder} in the backup is a link (to {os.readlink(folder)}), where a backup holds a "
                                "real folder; restore refuses to copy what a link names. Restore from a backup "
                                "`persmem backup` wrote.")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    for agent in agents:
        inbox = root / agent / "inbox"
        for folder in (root / agent, inbox, inbox / "tmp", inbox / "new", inbox / "cur"):
            folder.mkdir(mode=0o700)
        for sub in ("new", "cur"):
            if not (src / agent / "inbox" / sub).is_dir():
                continue
            for name in sorted(os.listdir(src / agent / "inbox" / sub)):
                source = src / agent / "inbox" / sub / name
                if name.endswith(SUFFIX) and source.is_file() and not source.is_symlink():
                    _copy_private(source, inbox / sub / name)
    return agents  # made durable by `persmem restore`, once for everything it wrote


def backup_backend(store, dest: Path) -> int:
    """Write every message a backend keeps into `dest` as `<agent>/inbox/{new,cur}/<name>` (0600 in 0700 folders);
    `store` is a MailStore on that backend. Returns how many messages were written."""
    written = 0
    for agent in store.on_disk():
        inbox = dest / agent / "inbox"
        for folder in (dest / agent, inbox, inbox / "tmp", inbox / "new", inbox / "cur"):
            folder.mkdir(mode=0o700, exist_ok=True)
        for sub in ("new", "cur"):
            names = store.backend.names(agent, sub)
            for start in range(0, len(names), 500):
                for name, data in store.backend.fetch(agent, names[start:start + 500]).items():
                    fd = os.open(inbox / sub / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                    with os.fdopen(fd, "wb") as out:
                        out.write(data)
                    written += 1
    return written

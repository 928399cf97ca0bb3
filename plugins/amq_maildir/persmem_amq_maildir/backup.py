"""Backups of the mail root: every delivered message (new/ and cur/), in the same layout.

Message files never change once delivered; they only move from new/ to cur/. A file that moves while we
copy is looked for in the other folder, so each message is copied once, to where it was last seen.
A backup holds everyone's mail, so it is the owner's alone whatever the modes of the originals: folders
0700 and files 0600 from creation (a copy keeps the message's times, never its mode).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from persmem_core.agents import NAME_RE

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

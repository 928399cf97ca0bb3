"""Backups of the mail root: every delivered message (new/ and cur/), in the same layout.

Message files never change once delivered; they only move from new/ to cur/. A file that moves while we
copy is looked for in the other folder, so each message is copied once, to where it was last seen.
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
        for sub in ("tmp", "new", "cur"):
            (dest / agent / "inbox" / sub).mkdir(parents=True, exist_ok=True)
        for folder, other in (("new", "cur"), ("cur", "new")):
            for name in sorted(os.listdir(inbox / folder)):
                if not name.endswith(SUFFIX) or (dest / agent / "inbox" / other / name).exists():
                    continue
                for where in (folder, other):
                    source = inbox / where / name
                    if source.is_symlink() or not source.is_file():
                        break
                    try:
                        shutil.copy2(source, dest / agent / "inbox" / where / name)
                        break
                    except FileNotFoundError:
                        continue

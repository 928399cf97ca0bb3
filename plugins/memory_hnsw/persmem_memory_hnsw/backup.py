"""Backups of the memory store.

The record log is append-only and every entry is checksummed, so copying it
up to its last intact entry is a consistent snapshot even while the server
appends. The vector index is derived and not copied: it is rebuilt on first
open of the restored store.

A backup holds every memory, so it is the owner's alone whatever the modes
of the originals: folders 0700 and files 0600, from creation.
"""

from __future__ import annotations

import os
from pathlib import Path

from .log import LOG_NAME, read_frames


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def backup_memory(folder: Path, dest: Path) -> None:
    if not folder.exists():
        return
    for collection in sorted(p for p in folder.iterdir() if p.is_dir()):
        log_path = collection / LOG_NAME
        if not log_path.exists():
            continue
        data = log_path.read_bytes()
        end = 0
        for _, frame_end, _ in read_frames(data):
            end = frame_end
        target = dest / collection.name
        target.mkdir(mode=0o700)
        _write_private(target / LOG_NAME, data[:end])
        for extra in ("model.json",):
            if (collection / extra).exists():
                _write_private(target / extra, (collection / extra).read_bytes())

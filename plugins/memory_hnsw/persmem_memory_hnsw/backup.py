"""Backups of the memory store.

The record log is append-only and every entry is checksummed, so copying it
up to its last intact entry is a consistent snapshot even while the server
appends. The vector index is derived and not copied: it is rebuilt on first
open of the restored store.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .log import read_frames


def backup_memory(folder: Path, dest: Path) -> None:
    if not folder.exists():
        return
    for collection in sorted(p for p in folder.iterdir() if p.is_dir()):
        log_path = collection / "records.log"
        if not log_path.exists():
            continue
        data = log_path.read_bytes()
        end = 0
        for _, frame_end, _ in read_frames(data):
            end = frame_end
        target = dest / collection.name
        target.mkdir(parents=True, exist_ok=True)
        (target / "records.log").write_bytes(data[:end])
        for extra in ("model.json",):
            if (collection / extra).exists():
                shutil.copy2(collection / extra, target / extra)

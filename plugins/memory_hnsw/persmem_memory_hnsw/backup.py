"""Backups of the memory store.

The record log is append-only and every entry is checksummed, so copying it
up to its last intact entry is a consistent snapshot even while the server
appends. The vector index is derived and not copied: it is rebuilt on first
open of the restored store (`restore_memory`, for `persmem restore`).

Frames are copied as stored, sealed ones still sealed: the CRC over the stored
payload tells where the intact frames end, so a backup needs no key (and
holds no plaintext of a sealed store). Restoring needs the key they were
sealed under, on the first open.

A backup holds every memory, so it is the owner's alone whatever the modes
of the originals: folders 0700 and files 0600, from creation.
"""

from __future__ import annotations

import os
from pathlib import Path

from .store.log import LOG_NAME, intact_end
from .store.replay import MODEL_RECORD


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
        end = intact_end(data)  # no key needed
        target = dest / collection.name
        target.mkdir(mode=0o700)
        _write_private(target / LOG_NAME, data[:end])
        for extra in (MODEL_RECORD,):
            if (collection / extra).exists():
                _write_private(target / extra, (collection / extra).read_bytes())


def restore_memory(service, src: Path) -> list[str]:
    """Copy each collection's log (and its model record) from a backup into the service's empty folder, under
    the store's owner lock, so a server that serves this home (or starts meanwhile) is refused, never mixed
    with. The vector index is not in the backup: the first open rebuilds it from the log. Returns the
    collections restored (made durable by `persmem restore`, once for everything it wrote)."""
    from persmem_core.sdk import UserError

    from .service import COLLECTION_RE

    service.lock()  # refused, naming the folder, while another persmem process owns it
    try:
        existing = [p.name for p in service.folder.iterdir() if p.is_dir() and COLLECTION_RE.match(p.name)]
        if existing:
            raise UserError(f"{service.folder} already holds collections ({', '.join(sorted(existing))}); restore only "
                            "into a fresh persmem home (move this one aside, or set PERSMEM_HOME to a new folder).")
        # A backup holds real folders and files only: a link would copy whatever it names (another store, a
        # private file) into this one, where agents read it.
        for path in [src, *src.iterdir(), *(p / name for p in src.iterdir() for name in (LOG_NAME, MODEL_RECORD))]:
            if path.is_symlink():
                raise UserError(f"{path} in the backup is a link (to {os.readlink(path)}), where a backup holds a "
                                "real folder or file; restore refuses to copy what a link names. Restore from a "
                                "backup `persmem backup` wrote.")
        collections = sorted(p for p in src.iterdir() if p.is_dir())
        for collection in collections:
            if not COLLECTION_RE.match(collection.name) or not (collection / LOG_NAME).is_file():
                raise UserError(f"{collection} is not a memory collection of a persmem backup (no {LOG_NAME}).")
        for collection in collections:
            target = service.folder / collection.name
            target.mkdir(mode=0o700)
            for name in (LOG_NAME, MODEL_RECORD):
                if (collection / name).is_file():
                    _write_private(target / name, (collection / name).read_bytes())
        return [c.name for c in collections]
    finally:
        service.stop()

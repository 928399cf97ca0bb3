"""Backups of the session archive, in the same layout.

Each session is copied metadata first, then its archive up to the length that metadata records
(`archive_bytes`): a capture running meanwhile only appends after that point, so the copy is a consistent
snapshot of every session without stopping the server. The index (the memory plugin's `sessions`
collection) is the memory plugin's to back up; a restored session whose turns are not indexed is indexed
again at the next start (its metadata's `indexed_lines` is reset to 0, and indexing twice stores once).
A backup holds everyone's sessions: folders 0700 and files 0600, from creation.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from persmem_core import UserError
from persmem_core.agents import NAME_RE

from . import archive
from .archive import ARCHIVE_SUFFIX, META_SUFFIX


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _copy_session(base: Path, meta: archive.SessionMeta, target: Path, reset_index: bool = False) -> None:
    with open(str(base) + ARCHIVE_SUFFIX, "rb") as f:
        data = f.read(meta.archive_bytes)
    if len(data) < meta.archive_bytes:
        raise UserError(f"{base}{ARCHIVE_SUFFIX} is shorter than its metadata says ({len(data)} of "
                        f"{meta.archive_bytes} bytes): the archive was damaged.")
    if reset_index:
        meta.indexed_lines = meta.indexed_turns = 0
    _write_private(Path(str(target) + ARCHIVE_SUFFIX), data)
    _write_private(Path(str(target) + META_SUFFIX), msgspec.json.format(msgspec.json.encode(meta)))


def backup_sessions(folder: Path, dest: Path) -> None:
    for base, meta in archive.scan(folder):
        agent, project = base.parent.parent.name, base.parent.name
        if base.parent.is_symlink() or base.parent.parent.is_symlink():
            continue
        (dest / agent).mkdir(mode=0o700, exist_ok=True)
        (dest / agent / project).mkdir(mode=0o700, exist_ok=True)
        _copy_session(base, meta, dest / agent / project / base.name)


def restore_sessions(folder: Path, src: Path) -> list[str]:
    """Copy a backup's sessions into an empty archive folder; refused (writing nothing) when the folder
    already holds anything or the backup holds links. Returns the agents restored."""
    if folder.exists() and any(folder.iterdir()):
        raise UserError(f"the session archive {folder} already holds files; restore only into a fresh persmem home "
                        "(move this one aside, or set PERSMEM_HOME to a new folder).")
    sessions = []
    for path in [src, *src.rglob("*")]:
        if path.is_symlink():
            raise UserError(f"{path} in the backup is a link (to {os.readlink(path)}), where a backup holds real "
                            "folders and files; restore refuses to copy what a link names. Restore from a backup "
                            "`persmem backup` wrote.")
    for base, meta in archive.scan(src):
        if not NAME_RE.match(base.parent.parent.name) or base.parent.parent.name != meta.agent:
            raise UserError(f"{base}{META_SUFFIX} is not a session of a persmem backup (its folder is not its agent).")
        sessions.append((base, meta))
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for base, meta in sessions:
        target_folder = folder / base.parent.parent.name / base.parent.name
        archive.make_private_dirs(target_folder)
        _copy_session(base, meta, target_folder / base.name, reset_index=True)
    return sorted({meta.agent for _, meta in sessions})

"""Backups of the session archive, in the same layout, as stored: a sealed archive or metadata stays sealed.

A backup needs no key: each session's metadata file is copied as it is, then its archive file whole. A
capture running meanwhile only appends after the length the copied metadata records (`archive_bytes`: a
capture cuts off only what lies past the last finished capture), so the copy is a consistent snapshot of every
session without stopping the server; whatever lies past that length in the copy is never read, and the
first capture after a restore cuts it off. The index (the memory plugin's `sessions` collection) is the
memory plugin's to back up.

A restore opens each metadata file (so it needs the key the backup was sealed under, with the host's Sealer),
copies the archive up to `archive_bytes`, and writes the metadata again with `indexed_lines` reset to 0 (sealed
as new writes are): the restored turns are indexed again at the next start, and indexing twice stores once.
A backup holds everyone's sessions: folders 0700 and files 0600, from creation.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from persmem_core.sdk import NAME_RE, Sealer, UserError

from . import archive
from .archive import ARCHIVE_SUFFIX, META_SUFFIX


def _create_private(path: Path):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "wb")


def _read_no_follow(path: Path):
    return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")


def backup_sessions(folder: Path, dest: Path) -> None:
    """Copy every session's metadata, then its archive, byte for byte (no key needed)."""
    for meta_file in archive.meta_paths(folder):
        project, agent = meta_file.parent, meta_file.parent.parent
        if agent.is_symlink() or project.is_symlink() or meta_file.is_symlink():
            continue
        base = Path(str(meta_file)[: -len(META_SUFFIX)])
        try:
            with _read_no_follow(meta_file) as f:
                meta_bytes = f.read()
            source = _read_no_follow(Path(str(base) + ARCHIVE_SUFFIX))
        except FileNotFoundError:
            continue  # a session that went away meanwhile (there is no deleting yet) or never finished its first
        with source:
            (dest / agent.name).mkdir(mode=0o700, exist_ok=True)
            (dest / agent.name / project.name).mkdir(mode=0o700, exist_ok=True)
            target = dest / agent.name / project.name / base.name
            with _create_private(Path(str(target) + META_SUFFIX)) as out:
                out.write(meta_bytes)
            with _create_private(Path(str(target) + ARCHIVE_SUFFIX)) as out:
                shutil.copyfileobj(source, out, 1 << 20)


def restore_sessions(folder: Path, src: Path, sealer: Sealer) -> list[str]:
    """Copy a backup's sessions into an empty archive folder; refused (writing nothing) when the folder
    already holds anything or the backup holds links. Metadata is opened with `sealer` (SealingError naming the
    file when its key is not on hand) and written again sealed as `sealer` writes. Returns the agents restored."""
    if folder.exists() and any(folder.iterdir()):
        raise UserError(f"the session archive {folder} already holds files; restore only into a fresh persmem home "
                        "(move this one aside, or set PERSMEM_HOME to a new folder).")
    sessions = []
    for path in [src, *src.rglob("*")]:
        if path.is_symlink():
            raise UserError(f"{path} in the backup is a link (to {os.readlink(path)}), where a backup holds real "
                            "folders and files; restore refuses to copy what a link names. Restore from a backup "
                            "`persmem backup` wrote.")
    for base, meta in archive.scan(src, sealer):
        if not NAME_RE.match(base.parent.parent.name) or base.parent.parent.name != meta.agent:
            raise UserError(f"{base}{META_SUFFIX} is not a session of a persmem backup (its folder is not its agent).")
        stored = archive.archive_path(base)
        if not stored.is_file() or stored.stat().st_size < meta.archive_bytes:
            raise UserError(f"{stored} is missing or shorter than its metadata says ({meta.archive_bytes} bytes): "
                            "the backup is damaged; restore from another one.")
        sessions.append((base, meta))
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for base, meta in sessions:
        target_folder = folder / base.parent.parent.name / base.parent.name
        archive.make_private_dirs(target_folder)
        target = target_folder / base.name
        with _read_no_follow(archive.archive_path(base)) as source, \
                _create_private(Path(str(target) + ARCHIVE_SUFFIX)) as out:
            left = meta.archive_bytes  # what lies past it was never a finished capture
            while left and (block := source.read(min(left, 1 << 20))):
                out.write(block)
                left -= len(block)
        meta.indexed_lines = meta.indexed_turns = 0
        with _create_private(Path(str(target) + META_SUFFIX)) as out:
            out.write(archive.encode_meta(meta, sealer))
    return sorted({meta.agent for _, meta in sessions})

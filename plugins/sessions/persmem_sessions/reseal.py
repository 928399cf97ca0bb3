"""`persmem key migrate|rotate` for the session archive: every archive and metadata file brought to the state
new writes have (sealed under the current key when encryption is on, plaintext when it is off).

Runs with no server (the caller holds the home's owner lock), so nothing captures meanwhile. Per session:

1. the archive, when it is in the other format or holds a frame that is not sealed under the current key, is
   written whole in the target format to `<name>.jsonl.gz.reseal` (its lines read back through the old key,
   re-chunked; a new archive id), fsynced, and renamed over the archive;
2. then the metadata is written atomically with the new archive's id and length (and sealed as new writes are).

A kill -9 between 1 and 2 leaves metadata whose `archive_id` is not the file's: the archive module's
`reconcile` sees that the file is the complete rewrite and adopts its id and length (the next server start or
reseal writes it). Before 1's rename, the old archive is untouched and a stale `.reseal` file is overwritten by
the next run. So every session stays readable at every instant, and running it again finishes it. At the end,
temporary files that killed writes left (which may hold plaintext from before) are removed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from persmem_core.sdk import ResealReport, Sealer, fsync_dir, is_sealed

from . import archive
from .archive import ARCHIVE_SUFFIX, META_SUFFIX, SessionMeta

RESEAL_SUFFIX = ARCHIVE_SUFFIX + ".reseal"
BLOCK_BYTES = 4 << 20  # plaintext lines per member or frame of a rewritten archive


def _blocks(base: Path, meta: SessionMeta, sealer: Sealer) -> Iterator[bytes]:
    block: list[bytes] = []
    size = 0
    for line in archive.raw_lines(base, meta, sealer):
        block.append(line)
        size += len(line)
        if size >= BLOCK_BYTES:
            yield b"".join(block)
            block, size = [], 0
    if block:
        yield b"".join(block)


def archive_state(base: Path, meta: SessionMeta, sealer: Sealer) -> tuple[bool, bool]:
    """(whether the archive must be rewritten, whether it holds any plaintext) for the target state."""
    if meta.archive_bytes == 0:
        return False, False
    if not meta.archive_id:
        return sealer.enabled, True
    heads = list(archive.frame_heads(base, meta))
    plain = any(not is_sealed(head) for head in heads)
    if not sealer.enabled:
        return True, plain
    return any(sealer.needs_reseal(head) for head in heads), plain


def reseal_session(base: Path, sealer: Sealer, dry_run: bool, report: ResealReport) -> None:
    meta_file = Path(str(base) + META_SUFFIX)
    raw = meta_file.read_bytes()
    try:
        meta = archive.decode_meta(meta_file, raw, sealer)  # SealingError (naming the file) when it does not open
    except (msgspec.DecodeError, msgspec.ValidationError):
        return  # not a session's metadata: the server skips it too (archive.scan)
    stale_meta = archive.reconcile(base, meta)  # a rewrite an earlier run renamed in before it was killed
    rewrite, plain = archive_state(base, meta, sealer)
    report.checked += 2
    report.plain += plain + (not is_sealed(raw))
    report.rewritten += rewrite + (rewrite or stale_meta or sealer.needs_reseal(raw))
    if dry_run:
        return
    tmp = Path(str(base) + RESEAL_SUFFIX)
    if rewrite:
        try:
            archive_id, length = archive.write_archive(tmp, _blocks(base, meta, sealer), sealer, sealer.enabled)
            os.rename(tmp, archive.archive_path(base))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        fsync_dir(base.parent)
        meta.archive_id, meta.archive_bytes = archive_id, length
    elif tmp.exists():
        os.unlink(tmp)  # left by a run killed before its rename: never read
    if rewrite or stale_meta or sealer.needs_reseal(raw):
        archive.write_meta(base, meta, sealer)


def reseal_sessions(folder: Path, sealer: Sealer, progress: Callable[[str, int, int], None],
                    dry_run: bool) -> ResealReport:
    """Reseal every session under `folder` (see the module's docstring); counts files (an archive and its
    metadata are two)."""
    report = ResealReport(what="sessions")
    paths = archive.meta_paths(folder)
    progress("sessions", 0, len(paths))
    for done, path in enumerate(paths, 1):
        reseal_session(Path(str(path)[: -len(META_SUFFIX)]), sealer, dry_run, report)
        progress("sessions", done, len(paths))
    if not dry_run:
        remove_leftovers(folder)
    return report


def remove_leftovers(folder: Path) -> None:
    """Temporary files of writes that were killed (atomic_write_bytes's `.persmem-*.tmp` beside metadata, this
    module's `.reseal`): never read, but they may hold what was written before this reseal, e.g. plaintext.
    Safe only with no writer running, as here."""
    if not folder.is_dir():
        return
    for pattern in ("*/*/.persmem-*.tmp", f"*/*/*{RESEAL_SUFFIX}"):
        for path in folder.glob(pattern):
            if path.is_file() and not path.is_symlink():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

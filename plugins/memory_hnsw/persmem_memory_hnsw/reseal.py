"""`persmem key migrate|rotate` for the memory store: every file brought to the state new writes have.

Each collection's record log is rewritten with every frame resealed (RecordLog.rewrite: new file, fsync, rename),
the index file and the retrieval counts are resealed (new file, fsync, rename; the index's sidecar checksum
follows it), and torn tails kept aside are sealed whole. The checkpoint (store/checkpoint.py: offsets into the log as it
is) is dropped, before the log is rewritten, when it or the log needs resealing; the next open saves a new one.
A kill -9 at any moment leaves each file either as it was or as it is meant to be, both readable with the keys on
hand (a rotation keeps the old key loaded until it is done). Leftover temp files of a killed compaction or save are garbage with no writer left (the owner lock is
held), so they are removed: they may hold plaintext.

Runs with no server (the caller holds the home's owner lock, and this takes the store's, as restore does).
Every frame is opened before anything is written, so a frame whose key is not on hand stops it with a
SealingError and the log as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from persmem_core.sdk import HEADER_BYTES, ResealReport, Sealer, atomic_write_bytes, fsync_dir, is_sealed

from .store.checkpoint import CHECKPOINT_NAME, drop as drop_checkpoint
from .store.retrievals import USAGE_NAME, USAGE_PURPOSE
from .store.log import LOG_NAME, PURPOSE, RecordLog, frame_needs_reseal, intact_frames, read_frames, reseal_frame
from .store.replay import INDEX_NAME
from .service import MemoryService, collection_folders
from .store.vectors import reseal_index

Progress = Callable[[str, int, int], None]


def reseal_store(folder: Path, config, sealer: Sealer, progress: Progress, dry_run: bool) -> ResealReport:
    """Reseal every collection of the memory folder `folder` (see the module); with `dry_run`, count only."""
    report = ResealReport(what="memory")
    if not Path(folder).is_dir():
        return report
    service = None
    if not dry_run:  # a dry run writes nothing, not even the lock file's pid
        service = MemoryService(folder, config, embedder=None, sealer=sealer)
        service.lock()  # StoreInUse, naming the folder, while a server owns the store
    try:
        files = [(kind, path) for collection in collection_folders(folder) for kind, path in _files(collection)]
        for done, (kind, path) in enumerate(files, 1):
            plain, rewritten = _RESEALERS[kind](path, sealer, dry_run)
            report.checked += 1
            report.plain += plain
            report.rewritten += rewritten
            progress("memory", done, len(files))
    finally:
        if service is not None:
            service.stop()
    return report


def _files(collection: Path) -> list[tuple[str, Path]]:
    """(kind, path) of each file of a collection that may hold memory text or vectors. Leftovers come first: the
    resealing below writes temp files of the same names (`vectors.hnsw.tmp`, `records.log.compact`)."""
    leftovers = [collection / f"{LOG_NAME}.compact", collection / f"{INDEX_NAME}.tmp",
                 collection / f"{CHECKPOINT_NAME}.tmp",
                 *sorted(collection.glob(".persmem-*.tmp"))]  # a killed compaction, index or checkpoint save, write
    found = [("leftover", path) for path in leftovers if path.is_file()]
    if (collection / CHECKPOINT_NAME).is_file():  # before the log: it is dropped before the log is rewritten
        found.append(("checkpoint", collection / CHECKPOINT_NAME))
    for name, kind in ((LOG_NAME, "log"), (INDEX_NAME, "index"), (USAGE_NAME, "usage")):
        if (collection / name).is_file():
            found.append((kind, collection / name))
    found += [("torn", path) for path in sorted(collection.glob(f"{LOG_NAME}.torn-*"))]
    return found


def _reseal_log(path: Path, sealer: Sealer, dry_run: bool) -> tuple[bool, bool]:
    """(held plaintext, was or would be rewritten). Every frame is opened first (SealingError: nothing written);
    a torn tail is cut and kept aside, sealed, as an open of the store would."""
    data = path.read_bytes()
    plain = any(not is_sealed(payload) for _, _, payload in intact_frames(data))
    if dry_run:
        spans = [(offset, end) for offset, end, _ in read_frames(data, sealer, path)]  # opens every frame
        return plain, any(frame_needs_reseal(memoryview(data)[start:end], sealer) for start, end in spans)
    record_log = RecordLog(path, sealer)
    try:
        spans = [(offset, end) for offset, end, _ in record_log.open_and_replay()]
        frames = [record_log.read(start, end) for start, end in spans]
        if not any(frame_needs_reseal(frame, sealer) for frame in frames):
            return plain, False
        record_log.rewrite(reseal_frame(frame, sealer, path) for frame in frames)
        return plain, True
    finally:
        record_log.close()


def _drop_checkpoint(path: Path, sealer: Sealer, dry_run: bool) -> tuple[bool, bool]:
    """The checkpoint is derived (store/checkpoint.py) and its log offsets are the log's as it is: when it or the log
    needs resealing it is dropped (before the log is rewritten), and the next open replays the log and saves a
    new one. (held plaintext, was or would be dropped)."""
    with open(path, "rb") as f:
        plain = not is_sealed(f.read(HEADER_BYTES))
    data = (path.parent / LOG_NAME).read_bytes() if (path.parent / LOG_NAME).is_file() else b""
    stale = any(sealer.needs_reseal(payload) for _, _, payload in intact_frames(data))
    with open(path, "rb") as f:
        stale = stale or sealer.needs_reseal(f.read(HEADER_BYTES))
    if stale and not dry_run:
        drop_checkpoint(path.parent)
    return plain, stale


def _reseal_index(path: Path, sealer: Sealer, dry_run: bool) -> tuple[bool, bool]:
    return reseal_index(path, sealer, dry_run=dry_run)


def _blob_resealer(purpose: bytes) -> Callable[[Path, Sealer, bool], tuple[bool, bool]]:
    def reseal_blob(path: Path, sealer: Sealer, dry_run: bool) -> tuple[bool, bool]:
        data = path.read_bytes()
        if not sealer.needs_reseal(data):
            return not is_sealed(data), False
        opened = sealer.open(data, purpose)  # SealingError before anything is written
        if not dry_run:
            atomic_write_bytes(path, sealer.seal(opened, purpose))
        return not is_sealed(data), True

    return reseal_blob


def _remove_leftover(path: Path, sealer: Sealer, dry_run: bool) -> tuple[bool, bool]:
    with open(path, "rb") as f:
        first = f.read(8 + HEADER_BYTES)
    plain = not (is_sealed(first) or is_sealed(first[8:]))  # a sealed stream or blob, or a log of sealed frames
    if not dry_run:
        path.unlink()
        fsync_dir(path.parent)
    return plain, True


_RESEALERS = {
    "log": _reseal_log,
    "index": _reseal_index,
    "checkpoint": _drop_checkpoint,
    "usage": _blob_resealer(USAGE_PURPOSE),
    "torn": _blob_resealer(PURPOSE),
    "leftover": _remove_leftover,
}

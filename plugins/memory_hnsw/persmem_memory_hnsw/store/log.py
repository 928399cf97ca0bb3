"""The record log: the authoritative copy of a collection.

Append-only frames `[u32 length][u32 crc32][payload]`, the payload a MessagePack entry, sealed
(`sealer.seal(..., b"memory.log")`, persmem_core.sdk.Sealer) when encryption is on. The CRC is over the payload as
stored, so telling an intact frame from a torn one needs no key (backups copy up to the last intact frame without
one), and plaintext frames written before encryption was switched on still read beside sealed ones. An append
returns only after the bytes and the file are fsynced, so an acknowledged write survives kill -9 (and power loss,
where the disk honours fsync). Writers that come together share one fsync (group commit): each writes its frames
under the collection's lock (`write`), then, outside it, waits until an fsync has covered them (`sync_to`): the
first to arrive fsyncs for everyone whose frames were written by then. A failed fsync leaves no way to tell which
of the frames written since the last good one are on the disk: the log refuses writes until `recover` (called
under the collection's write lock) has cut it back to the last fsynced frame, and every writer whose frames were
after it is told nothing was stored. On open, frames are replayed up to the last intact one; a torn or corrupt tail is
cut off (and kept aside in `<name>.torn-<time>` for inspection, sealed whole when encryption is on), so the log
always opens. An intact frame that does not open (its key is not on hand, or it was changed on disk) is never
taken for a torn tail: it stops the open with a SealingError, before anything is written. Compaction rewrites the
live entries' frames, as stored, to a new file and atomically replaces the old one.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from persmem_core.sdk import (
    SEALED_MAGIC,
    Sealer,
    SealingError,
    UserError,
    fsync_dir,
    is_sealed,
    open_private,
    write_all,
)

from .records import Entry

LOG_NAME = "records.log"  # a collection's log, in its folder (backups copy it by this name)
HEADER = struct.Struct("<II")
MAX_FRAME = 64 * 1024 * 1024
log = logging.getLogger("persmem.memory.log")

PURPOSE = b"memory.log"  # what a frame's payload is sealed as (its associated data)
_PLAIN = Sealer.plain()  # no key: writes plaintext, reads plaintext, refuses sealed frames

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Entry)


def encode_frame(entry, sealer: Sealer | None = None) -> bytes:
    """One frame holding `entry`, its payload sealed when `sealer` is enabled."""
    payload = (sealer or _PLAIN).seal(_encoder.encode(entry), PURPOSE)
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def open_payload(payload: bytes | memoryview, sealer: Sealer | None, where: Path | str) -> bytes:
    """A frame's MessagePack, opened if sealed. SealingError naming `where` (the log) and the fix when it can not
    be opened: never a reason to cut the log there."""
    if payload[:4] != SEALED_MAGIC:
        return payload  # plaintext, as it is (no copy)
    try:
        return (sealer or _PLAIN).open(payload, PURPOSE)
    except SealingError as exc:  # its message names the key and where to put it back
        raise SealingError(f"{where}: {exc}") from None


def decode_frame(frame: bytes, sealer: Sealer | None = None, where: Path | str = "the memory log"):
    """The entry of one whole frame (as `RecordLog.read` returns it); ValueError if it is damaged, SealingError if
    it is sealed and does not open."""
    length, crc = HEADER.unpack_from(frame, 0)
    payload = memoryview(frame)[HEADER.size : HEADER.size + length]
    if len(payload) != length or zlib.crc32(payload) != crc:
        raise ValueError("damaged log frame")
    return _decoder.decode(open_payload(payload, sealer, where))


def intact_frames(data: bytes | memoryview) -> Iterator[tuple[int, int, memoryview]]:
    """Yield (offset, end, payload as stored) for each frame whose length and CRC are right; stops at the first
    that is not (a torn or damaged tail). Needs no key."""
    view = memoryview(data)
    offset = 0
    while offset + HEADER.size <= len(view):
        length, crc = HEADER.unpack_from(view, offset)
        end = offset + HEADER.size + length
        if length > MAX_FRAME or end > len(view):
            return
        payload = view[offset + HEADER.size : end]
        if zlib.crc32(payload) != crc:
            return
        yield offset, end, payload
        offset = end


def read_frames(data: bytes | memoryview, sealer: Sealer | None = None,
                where: Path | str = "the memory log") -> Iterator[tuple[int, int, object]]:
    """Yield (offset, end, entry) for each intact frame; stops at the first bad one. An intact frame that is
    sealed and does not open raises SealingError (naming `where`): it is not a torn tail."""
    for offset, end, payload in intact_frames(data):
        try:
            entry = _decoder.decode(open_payload(payload, sealer, where))
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        yield offset, end, entry


def intact_end(data: bytes | memoryview) -> int:
    """Where the intact frames of a log end (what replay keeps), found without a key: a plaintext frame must also
    decode; a sealed one is vouched for by its CRC (its content is checked when it is opened)."""
    end = 0
    for _, frame_end, payload in intact_frames(data):
        if not is_sealed(payload):
            try:
                _decoder.decode(payload)
            except (msgspec.DecodeError, msgspec.ValidationError):
                break
        end = frame_end
    return end


def reseal_frame(frame: bytes | memoryview, sealer: Sealer, where: Path | str) -> bytes:
    """A whole frame with its payload brought to the state new writes have (`sealer.reseal`)."""
    length, _ = HEADER.unpack_from(frame, 0)
    payload = open_payload(memoryview(frame)[HEADER.size : HEADER.size + length], sealer, where)
    sealed = sealer.seal(payload, PURPOSE)
    return HEADER.pack(len(sealed), zlib.crc32(sealed)) + sealed


def frame_needs_reseal(frame: bytes | memoryview, sealer: Sealer) -> bool:
    return sealer.needs_reseal(memoryview(frame)[HEADER.size :])


class RecordLog:
    def __init__(self, path: Path, sealer: Sealer | None = None):
        self.path = Path(path)
        self.sealer = sealer  # None: no key (plaintext written, sealed frames refused)
        self._fd: int | None = None
        self.size = 0
        self.dead_bytes = 0  # bytes of superseded entries, for compaction decisions
        self.synced = 0  # the log is on the disk up to here (fsynced)
        self._sync_lock = threading.Lock()  # one fsync at a time; taken also while the file is swapped or closed
        self._broken: OSError | None = None  # a failed fsync: nothing more is written until `recover` cuts it back
        self.crc: int | None = None  # CRC-32 of the log's first `size` bytes, kept as frames are written; None: unknown

    def open_and_replay(self, start: int = 0, start_crc: int | None = None) -> Iterator[tuple[int, int, object]]:
        """Replay every intact entry from `start` (0, or a frame boundary a checkpoint vouched for, `start_crc`
        the CRC-32 of the bytes before it when known), cut a torn tail, then open for appends. Offsets are the
        file's."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        data = b""
        if self.path.exists():
            with open(self.path, "rb") as f:
                f.seek(start)
                data = f.read()
        good_end = 0
        for offset, end, entry in read_frames(data, self.sealer, self.path):  # SealingError: nothing written yet
            good_end = end
            yield start + offset, start + end, entry
        if good_end < len(data):
            aside = self.path.with_name(f"{self.path.name}.torn-{int(time.time())}")
            # Sealed whole when encryption is on: a torn frame of a plaintext log holds memory text.
            with open_private(aside) as f:
                f.write((self.sealer or _PLAIN).seal(data[good_end:], PURPOSE))
            log.warning("%s: cut %d bytes of torn or corrupt tail (kept in %s)", self.path, len(data) - good_end, aside)
            with open(self.path, "r+b") as f:
                f.truncate(start + good_end)
                os.fsync(f.fileno())
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self.size = self.synced = start + good_end
        known = 0 if start == 0 else start_crc
        self.crc = None if known is None else zlib.crc32(memoryview(data)[:good_end], known)
        self._broken = None
        fsync_dir(self.path.parent)

    def append(self, entries: Iterable) -> list[tuple[int, int]]:
        """Write entries durably; returns their (offset, end). Raises OSError and writes nothing visible on failure.
        (`write` + `sync_to`, for a caller that holds no lock the other writers wait for.)"""
        spans = self.write(entries)
        if spans:
            self.sync_to(spans[-1][1])
        return spans

    def write(self, entries: Iterable) -> list[tuple[int, int]]:
        """Write entries (not yet durable: `sync_to` their end before acknowledging them); returns their (offset,
        end). The caller holds the collection's write lock. Raises OSError and leaves the log as it was on
        failure."""
        assert self._fd is not None, "log not open"
        if self._broken is not None:
            self.recover()
        frames = [encode_frame(e, self.sealer) for e in entries]
        blob = b"".join(frames)
        start = self.size
        try:
            write_all(self._fd, blob)  # a short write is followed by the error that stopped it (ENOSPC...)
        except OSError:
            # Never leave a partial frame behind an acknowledged one.
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass
            raise
        if self.crc is not None:
            self.crc = zlib.crc32(blob, self.crc)
        spans, pos = [], start
        for frame in frames:
            spans.append((pos, pos + len(frame)))
            pos += len(frame)
        self.size = pos
        return spans

    def sync_to(self, end: int) -> None:
        """Return once the log is on the disk at least up to `end` (an offset `write` returned): one fsync covers
        every frame written before it, so writers arriving together share it. OSError if the fsync failed, or if
        the frames up to `end` were cut off after one failed (`recover`): they are not stored."""
        if self.synced >= end:
            return
        with self._sync_lock:
            if self.synced >= end:
                return
            if self._broken is not None:
                raise self._broken
            covered = self.size  # written before this fsync starts: all of it is on the disk when it returns
            try:
                os.fsync(self._fd)
            except OSError as exc:
                self._broken = exc
                log.error("%s: fsync failed (%s); refusing writes until the log is cut back to %d bytes",
                          self.path, exc, self.synced)
                raise
            self.synced = max(self.synced, covered)
            if self.synced < end:
                raise OSError(errno.EIO, "an fsync failed before this write was on the disk, so it was cut off")

    def recover(self) -> None:
        """After a failed fsync: cut the log back to the last fsynced frame and confirm that on the disk, so the
        log holds exactly what was acknowledged; writes are taken again. The caller holds the collection's write
        lock (no frame is being written). Raises OSError, and the log keeps refusing writes, if that fails too."""
        with self._sync_lock:
            if self._broken is None:
                return
            os.ftruncate(self._fd, self.synced)
            self.size = self.synced
            self.crc = None  # of bytes cut off: the next checkpoint reads the log for it
            os.fsync(self._fd)
            self._broken = None
            log.warning("%s: cut back to %d bytes after a failed fsync; writes are taken again", self.path, self.size)

    def read(self, start: int, end: int) -> bytes:
        """The bytes of one frame, by its span."""
        assert self._fd is not None, "log not open"
        return os.pread(self._fd, end - start, start)

    def rewrite(self, entries: Iterable) -> list[tuple[int, int]]:
        """Replace the log with exactly `entries` (entries, sealed as new writes are, or whole frames as bytes,
        copied as they are), atomically and durably; returns their spans. Also on a log that is not open."""
        tmp = self.path.with_name(self.path.name + ".compact")
        spans = []
        try:
            with open_private(tmp) as f:
                size, crc = 0, 0
                for entry in entries:
                    frame = entry if isinstance(entry, bytes) else encode_frame(entry, self.sealer)
                    f.write(frame)
                    crc = zlib.crc32(frame, crc)
                    spans.append((size, size + len(frame)))
                    size += len(frame)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)  # the old log is untouched; do not leave a half copy taking the space
            raise
        with self._sync_lock:  # no fsync runs on the old file's descriptor while it is swapped
            if self._fd is not None:
                os.close(self._fd)
            os.replace(tmp, self.path)
            fsync_dir(self.path.parent)
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
            self.size = self.synced = size
            self.crc = crc
            self.dead_bytes = 0
        return spans

    def close(self) -> None:
        with self._sync_lock:
            if self._fd is not None:
                if self._broken is None and self.synced < self.size:
                    try:
                        os.fsync(self._fd)
                    except OSError as exc:
                        log.error("%s: fsync on close failed (%s)", self.path, exc)
                os.close(self._fd)
                self._fd = None


class WriteFailed(UserError):
    """A write did not happen for a reason outside the memory (the disk refused it, the cluster did not confirm
    it). Unlike a refused memory, calling again later may succeed (a background indexer keeps the work for then
    instead of skipping it)."""


def write_failed(folder: Path, exc: OSError, outcome: str) -> str:
    """What a caller is told when the store's disk refused a write: which disk (by its mount point; the full
    path goes to the server log only), the outcome, and the fix."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"the disk holding the memory store (mounted at {_mount_point(folder)}) is full: {outcome}. "
                "Free some space on it (or raise the quota) and call again; memories stored before are intact.")
    return (f"the memory store could not write to its disk ({exc.strerror or exc}): {outcome}. "
            "The server log has the details; `persmem doctor` checks the data folder.")


def _mount_point(path: Path) -> str:
    path = Path(os.path.realpath(path))
    while not os.path.ismount(path) and path != path.parent:
        path = path.parent
    return str(path)

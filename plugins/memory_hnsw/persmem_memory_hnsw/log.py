"""The record log: the authoritative copy of a collection.

Append-only frames `[u32 length][u32 crc32][MessagePack entry]`. An append
returns only after the bytes and the file are fsynced, so an acknowledged
write survives kill -9 (and power loss, where the disk honours fsync). On
open, frames are replayed up to the last intact one; a torn or corrupt tail
is cut off (and kept aside in `<name>.torn-<time>` for inspection), so the
log always opens. Compaction rewrites live entries to a new file and
atomically replaces the old one.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
import time
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from persmem_core.fileio import fsync_dir

from .records import Entry

LOG_NAME = "records.log"  # a collection's log, in its folder (backups copy it by this name)
HEADER = struct.Struct("<II")
MAX_FRAME = 64 * 1024 * 1024
log = logging.getLogger("persmem.memory.log")

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Entry)


def encode_frame(entry) -> bytes:
    payload = _encoder.encode(entry)
    return HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def decode_frame(frame: bytes):
    """The entry of one whole frame (as `RecordLog.read` returns it); ValueError if it is damaged."""
    length, crc = HEADER.unpack_from(frame, 0)
    payload = memoryview(frame)[HEADER.size : HEADER.size + length]
    if len(payload) != length or zlib.crc32(payload) != crc:
        raise ValueError("damaged log frame")
    return _decoder.decode(payload)


def read_frames(data: bytes | memoryview) -> Iterator[tuple[int, int, object]]:
    """Yield (offset, end, entry) for each intact frame; stops at the first bad one."""
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
        try:
            entry = _decoder.decode(payload)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        yield offset, end, entry
        offset = end


class RecordLog:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd: int | None = None
        self.size = 0
        self.dead_bytes = 0  # bytes of superseded entries, for compaction decisions

    def open_and_replay(self) -> Iterator[tuple[int, int, object]]:
        """Replay every intact entry, cut a torn tail, then open for appends."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = self.path.read_bytes() if self.path.exists() else b""
        good_end = 0
        for offset, end, entry in read_frames(data):
            good_end = end
            yield offset, end, entry
        if good_end < len(data):
            aside = self.path.with_name(f"{self.path.name}.torn-{int(time.time())}")
            aside.write_bytes(data[good_end:])
            log.warning("%s: cut %d bytes of torn or corrupt tail (kept in %s)", self.path, len(data) - good_end, aside)
            with open(self.path, "r+b") as f:
                f.truncate(good_end)
                os.fsync(f.fileno())
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self.size = good_end
        fsync_dir(self.path.parent)

    def append(self, entries: Iterable) -> list[tuple[int, int]]:
        """Write entries durably; returns their (offset, end). Raises OSError and writes nothing visible on failure."""
        assert self._fd is not None, "log not open"
        frames = [encode_frame(e) for e in entries]
        blob = b"".join(frames)
        start = self.size
        try:
            view, written = memoryview(blob), 0
            while written < len(blob):  # a short write is followed by the error that stopped it (ENOSPC...)
                done = os.write(self._fd, view[written:])
                if done == 0:
                    raise OSError(errno.EIO, "the log write made no progress")
                written += done
            os.fsync(self._fd)
        except OSError:
            # Never leave a partial frame behind an acknowledged one.
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass
            raise
        spans, pos = [], start
        for frame in frames:
            spans.append((pos, pos + len(frame)))
            pos += len(frame)
        self.size = pos
        return spans

    def read(self, start: int, end: int) -> bytes:
        """The bytes of one frame, by its span."""
        assert self._fd is not None, "log not open"
        return os.pread(self._fd, end - start, start)

    def rewrite(self, entries: Iterable) -> list[tuple[int, int]]:
        """Replace the log with exactly `entries` (entries, or frames as bytes), atomically and durably;
        returns their spans."""
        tmp = self.path.with_name(self.path.name + ".compact")
        spans = []
        try:
            with open(tmp, "wb") as f:
                size = 0
                for entry in entries:
                    frame = entry if isinstance(entry, bytes) else encode_frame(entry)
                    f.write(frame)
                    spans.append((size, size + len(frame)))
                    size += len(frame)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)  # the old log is untouched; do not leave a half copy taking the space
            raise
        self.close()
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        self.size = size
        self.dead_bytes = 0
        return spans

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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

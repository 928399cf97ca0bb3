"""Sealing data at rest: AES-256-GCM (`cryptography`) over what plugins write, under the home's key.

A sealed blob is self-describing, so plaintext written before encryption was switched on still reads:

    b"\\xc1PMS" + b"\\x01" + key id (8 bytes) + nonce (12 bytes) + ciphertext + tag (16 bytes)   (41 bytes more)

0xc1 never starts MessagePack, JSON, gzip or a mail header: "is this sealed" is one prefix check. The key id
names the key (keys.key_id), so data sealed under a key that is not on hand is told apart from damaged data:
a clear error naming the fix, never a torn tail to cut off. Each blob has a fresh random nonce (2^-32 collision
risk only after about 2^32 blobs per key: rotate long before). `purpose` is the associated data: a blob only
opens as what it was sealed for (a message can not be passed off as a memory).

Large files (the vector index) are sealed as a stream of 1 MiB segments, each its own GCM message whose
associated data carries the segment's number and whether it is the last, so segments can not be reordered,
dropped or cut off unnoticed, and neither side ever holds the whole file:

    b"\\xc1PMS" + b"\\x02" + key id (8) + { [u32 plaintext length][nonce (12)][ciphertext + tag] }...
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from typing import BinaryIO

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from persmem_core.errors import UserError

SEALED_MAGIC = b"\xc1PMS"
BLOB, STREAM = b"\x01", b"\x02"
KEY_ID_BYTES = 8
NONCE_BYTES = 12
TAG_BYTES = 16
HEADER_BYTES = len(SEALED_MAGIC) + 1 + KEY_ID_BYTES  # 13: magic, kind, key id
OVERHEAD = HEADER_BYTES + NONCE_BYTES + TAG_BYTES  # 41 bytes a blob adds
SEGMENT = 1 << 20
_SEGMENT_HEAD = struct.Struct("<I")


class SealingError(UserError):
    """Sealed data that can not be opened: its key is not on hand, or it fails authentication (changed on disk)."""


class KeyNotOnHand(SealingError):
    """Sealed under a key that is not loaded (another node's key, or one removed too early)."""


class NotAuthentic(SealingError):
    """Sealed under a key that is loaded, but it does not open as what it was asked to open as: changed, cut, or
    sealed for another purpose (another place, for a frame bound to its place)."""


class ResealReport(msgspec.Struct, kw_only=True):
    """What a plugin's `reseal` hook did (or, with dry_run, would do)."""

    what: str  # e.g. "memory", "sessions", "mail"
    checked: int = 0  # files looked at
    rewritten: int = 0  # files rewritten (with dry_run: files that would be)
    plain: int = 0  # of the checked files, how many held any plaintext before


def is_sealed(data: bytes | memoryview) -> bool:
    return bytes(data[: len(SEALED_MAGIC)]) == SEALED_MAGIC


def sealed_key_id(data: bytes | memoryview) -> str | None:
    """The hex id of the key a sealed blob or stream was sealed under; None for plaintext."""
    if not is_sealed(data) or len(data) < HEADER_BYTES:
        return None
    return _key_id_bytes(data).hex()


def _key_id_bytes(data: bytes | memoryview) -> bytes:
    """The key id of sealed data (bytes 5 to 13: after the magic and the kind)."""
    return bytes(data[len(SEALED_MAGIC) + 1 : HEADER_BYTES])


class Sealer:
    """Seals new writes under the current key (when `enabled`) and opens data sealed under any key on hand.

    `keys` maps hex key id -> 32-byte key: the current key and, during a rotation, the one being replaced."""

    def __init__(self, keys: dict[str, bytes], current: str | None, enabled: bool):
        if enabled and current not in keys:
            raise ValueError("an enabled Sealer needs its current key")
        self.enabled = enabled
        self.key_id = current if enabled else None
        self.known_ids = sorted(keys)
        self._ciphers = {bytes.fromhex(kid): AESGCM(key) for kid, key in keys.items()}
        self._current = bytes.fromhex(current) if enabled else b""
        self._aads: dict[tuple[bytes, bytes], bytes] = {}

    @classmethod
    def plain(cls) -> Sealer:
        """A Sealer without keys: writes plaintext, opens plaintext, refuses sealed data."""
        return cls({}, None, False)

    # -- blobs -----------------------------------------------------------------------------------------------
    def seal(self, data: bytes | memoryview, purpose: bytes) -> bytes:
        """`data` sealed under the current key when enabled, else `data` unchanged."""
        if not self.enabled:
            return bytes(data)
        nonce = os.urandom(NONCE_BYTES)
        aad = self._aad(self._current, purpose)
        return aad[:HEADER_BYTES] + nonce + self._ciphers[self._current].encrypt(nonce, data, aad)

    def open(self, data: bytes | memoryview, purpose: bytes) -> bytes:
        """The plaintext of a sealed blob; anything not sealed comes back unchanged. SealingError when the blob's
        key is not on hand or it fails authentication."""
        if data[: len(SEALED_MAGIC)] != SEALED_MAGIC:
            return bytes(data)
        if len(data) < OVERHEAD or data[len(SEALED_MAGIC)] != BLOB[0]:
            raise SealingError("sealed data is cut short or not a sealed blob (the file was damaged or changed); "
                               "restore it from a backup.")
        kid = _key_id_bytes(data)
        cipher = self._cipher_for(kid)
        view = memoryview(data)  # slices below copy nothing
        try:
            return cipher.decrypt(view[HEADER_BYTES : HEADER_BYTES + NONCE_BYTES], view[HEADER_BYTES + NONCE_BYTES :],
                                  self._aad(kid, purpose))
        except InvalidTag:
            raise NotAuthentic(f"sealed data does not authenticate under key {kid.hex()} (it was changed on "
                               "disk, or written as something else); restore it from a backup.") from None

    def _aad(self, kid: bytes, purpose: bytes) -> bytes:
        """A blob's associated data: its header (magic, kind, key id) and its purpose; made once per pair."""
        aad = self._aads.get((kid, purpose))
        if aad is None:
            aad = self._aads[(kid, purpose)] = SEALED_MAGIC + BLOB + kid + purpose
        return aad

    def needs_reseal(self, data: bytes | memoryview) -> bool:
        """Whether `data` differs from what a write now produces: plaintext while enabled, sealed under another
        key, or sealed while encryption is off."""
        if not is_sealed(data):
            return self.enabled
        return not self.enabled or _key_id_bytes(data) != self._current

    def _cipher_for(self, kid: bytes) -> AESGCM:
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise KeyNotOnHand(missing_key_message(kid.hex(), self.known_ids))
        return cipher

    # -- streams (large files) -----------------------------------------------------------------------------

    def seal_stream(self, src: BinaryIO, dst: BinaryIO, purpose: bytes) -> None:
        """Copy `src` to `dst`, sealed in 1 MiB segments when enabled (else copied as is)."""
        if not self.enabled:
            _copy(src, dst)
            return
        header = SEALED_MAGIC + STREAM + self._current
        cipher = self._ciphers[self._current]
        dst.write(header)
        number, block = 0, src.read(SEGMENT)
        while True:
            following = src.read(SEGMENT) if block else b""
            last = not following
            nonce = os.urandom(NONCE_BYTES)
            aad = header + purpose + struct.pack("<Q?", number, last)
            dst.write(_SEGMENT_HEAD.pack(len(block)) + nonce + cipher.encrypt(nonce, block, aad))
            if last:
                return
            number, block = number + 1, following

    def open_stream(self, src: BinaryIO, dst: BinaryIO, purpose: bytes) -> None:
        """Copy `src` to `dst`, opened if it is a sealed stream (plaintext is copied as is). SealingError when
        its key is not on hand or any segment is missing, reordered, cut or changed."""
        header = src.read(HEADER_BYTES)
        if not is_sealed(header):
            dst.write(header)
            _copy(src, dst)
            return
        cipher = self._stream_cipher(header)
        head_size = _SEGMENT_HEAD.size + NONCE_BYTES
        number, head = 0, src.read(head_size)
        while True:
            if len(head) < head_size:
                raise _cut_short()
            length = _segment_length(head)
            body = src.read(length + TAG_BYTES)
            following = src.read(head_size)
            last = not following  # a segment sealed as the last must end the file, and the file must end with one
            try:
                plain = cipher.decrypt(head[_SEGMENT_HEAD.size :], body,
                                       header + purpose + struct.pack("<Q?", number, last))
            except InvalidTag:
                raise _changed(number, header) from None
            dst.write(plain)
            if last:
                return
            number, head = number + 1, following

    def _stream_cipher(self, header: bytes) -> AESGCM:
        """The cipher a sealed stream's header names; SealingError when it is no stream header, or its key is not
        on hand."""
        if len(header) < HEADER_BYTES or header[len(SEALED_MAGIC) : len(SEALED_MAGIC) + 1] != STREAM:
            raise SealingError("a sealed file is cut short or not a sealed stream; restore it from a backup.")
        return self._cipher_for(_key_id_bytes(header))

    def open_buffer(self, data: bytes | bytearray | memoryview, purpose: bytes) -> memoryview:
        """What open_stream writes, for a stream already in memory: each segment is decrypted straight into one
        buffer, with no copy between (a 1 GB checkpoint costs 1 GB more, not several). Data that is not sealed
        comes back as a view of itself. Same checks and errors as open_stream."""
        view = memoryview(data).cast("B")
        if not is_sealed(view):
            return view
        header = bytes(view[:HEADER_BYTES])
        cipher = self._stream_cipher(header)
        head_size = _SEGMENT_HEAD.size + NONCE_BYTES
        plain = memoryview(bytearray(len(view)))  # more than enough: every segment's plaintext is shorter
        at, done, number = HEADER_BYTES, 0, 0
        while True:
            if len(view) - at < head_size:
                raise _cut_short()
            length = _segment_length(view[at : at + _SEGMENT_HEAD.size])
            body, end = at + head_size, at + head_size + length + TAG_BYTES
            last = end >= len(view)
            if end > len(view):
                raise _changed(number, header)
            try:
                cipher.decrypt_into(view[at + _SEGMENT_HEAD.size : body], view[body:end],
                                    header + purpose + struct.pack("<Q?", number, last), plain[done : done + length])
            except InvalidTag:
                raise _changed(number, header) from None
            done += length
            if last:
                return plain[:done]
            at, number = end, number + 1


def _segment_length(head: bytes | memoryview) -> int:
    (length,) = _SEGMENT_HEAD.unpack_from(head)
    if length > SEGMENT:
        raise SealingError("a sealed file has a segment longer than any persmem writes (it was changed).")
    return length


def _cut_short() -> SealingError:
    return SealingError("a sealed file ends before its last segment (it was cut short); the data it holds is "
                        "incomplete.")


def _changed(number: int, header: bytes) -> NotAuthentic:
    return NotAuthentic(f"segment {number} of a sealed file does not authenticate under key {header[5:].hex()} "
                        "(the file was changed, cut or added to); restore it from a backup.")


def missing_key_message(key_id: str, known: list[str]) -> str:
    on_hand = ", ".join(known) if known else "none"
    return (f"this data was sealed under key {key_id}, which is not on hand (keys loaded: {on_hand}). Put that "
            "key back: the key file ([encryption] key_file, default <home>/persmem.key), PERSMEM_KEY, or the "
            "systemd credential persmem.key; `persmem key status` shows which key is loaded and from where.")


def _copy(src: BinaryIO, dst: BinaryIO) -> None:
    while block := src.read(SEGMENT):
        dst.write(block)


@contextlib.contextmanager
def scratch_file(name: str) -> Iterator[tuple[str, BinaryIO]]:
    """An in-memory file (memfd) with a path (/proc/self/fd/N), for a library that only reads and writes paths
    (hnswlib's save_index/load_index): the plaintext never touches a disk. Yields (path, file opened r+b)."""
    fd = os.memfd_create(f"persmem-{name}", os.MFD_CLOEXEC)
    with os.fdopen(fd, "r+b") as f:
        yield f"/proc/self/fd/{fd}", f

"""The session archive on disk: one archive file and one metadata file per captured session.

    <home>/sessions/<agent>/<project>/<client>-<session_id>.jsonl.gz    redacted transcript lines
    <home>/sessions/<agent>/<project>/<client>-<session_id>.meta.json   SessionMeta below

An archive file is in one of two formats, fixed by its first bytes (and named by the metadata's `archive_id`):

- plain (`archive_id` ""): gzip members, one per capture (a gzip file may hold several; readers see one
  stream). Archives written before encryption, or while [encryption] is off; `zcat` reads them.
- sealed (`archive_id` = 16 hex digits): ARCHIVE_MAGIC + the id (8 bytes), then one frame per capture,
  `[u32 big-endian length][sealer.seal(gzip member, b"sessions.archive")]`. A frame appended while
  encryption is off holds the bare gzip member (the frame format stays; `persmem key migrate` seals it).

A new session's archive takes the format new writes have (sealed when the home's Sealer is enabled); an
existing file keeps its format at every capture until `persmem key migrate|rotate` rewrites it (reseal.py).
The metadata holds the session's title (the start of its first user turn): it is written whole, sealed as one
blob (b"sessions.meta") when encryption is on.

Every capture appends its member or frame and fsyncs it, then replaces the metadata atomically
(persmem_core.sdk.atomic_write_bytes). The metadata's `archive_bytes` is the length of the archive as of the last
capture that finished: what a capture that crashed before its metadata wrote is cut off by the next capture and
never read, so the line count in the metadata is the truth. A rewrite by reseal.py replaces the whole archive (new file,
fsync, rename) before the metadata: `archive_id` tells whether the metadata describes the file on disk, and
when it does not (a crash between the two), the file on disk is the complete rewrite and `reconcile` adopts it.
Folders are 0700 and files 0600 from creation: a transcript is as private as what was said in it.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import io
import itertools
import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from persmem_core.sdk import HEADER_BYTES as BLOB_HEAD_BYTES  # a sealed blob's magic, kind and key id
from persmem_core.sdk import SEALED_MAGIC, Sealer, SealingError, UserError, atomic_write_bytes, fsync_dir, write_all

ARCHIVE_SUFFIX = ".jsonl.gz"
META_SUFFIX = ".meta.json"
ARCHIVE_PURPOSE = b"sessions.archive"
META_PURPOSE = b"sessions.meta"
GZIP_MAGIC = b"\x1f\x8b"
ARCHIVE_MAGIC = SEALED_MAGIC + b"SARC"  # a sealed archive's first 8 bytes; its id follows (8 bytes)
ID_BYTES = 8
HEADER_BYTES = len(ARCHIVE_MAGIC) + ID_BYTES
FRAME_HEAD = struct.Struct(">I")  # big-endian: a frame length can never start with gzip's 1f 8b (529 MB)


class ArchiveDamaged(UserError):
    """An archive that does not hold what its metadata says (cut short, overwritten, not an archive)."""


class SessionMeta(msgspec.Struct, kw_only=True):
    """What the archive knows about one session, beside its lines."""

    agent: str
    client: str
    session_id: str
    project: str
    cwd: str = ""
    lines: int = 0  # transcript lines archived (the next capture must start at this line)
    turns: int = 0  # turns those lines hold (transcripts.line_turns)
    archive_bytes: int = 0  # length of the archive file as of the last finished capture
    archive_id: str = ""  # "" plain gzip; else the sealed archive's id (its bytes 8-16), hex
    sha256: str = ""  # over the archived content, chained per capture: sha256(previous digest + new bytes)
    redactions: int = 0  # secrets replaced in this session's lines, in all
    first_time: str = ""  # the first and last turn's time (else when first and last captured)
    last_time: str = ""
    captures: int = 0
    title: str = ""  # the start of the session's first user turn
    indexed_lines: int = 0  # lines whose turns the memory side has (the indexing worker resumes here)
    indexed_turns: int = 0


def make_private_dirs(path: Path) -> None:
    """`path` and any missing parents made 0700 (an existing folder's mode is set too)."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)


def base_path(root: Path, agent: str, project: str, client: str, session_id: str) -> Path:
    """The path of a session's files without their suffix."""
    return root / agent / project / f"{client}-{session_id}"


def archive_path(base: Path) -> Path:
    return Path(str(base) + ARCHIVE_SUFFIX)


def meta_path(base: Path) -> Path:
    return Path(str(base) + META_SUFFIX)


# -- metadata ----------------------------------------------------------------------------------------------------

def decode_meta(path: Path, raw: bytes, sealer: Sealer) -> SessionMeta:
    """A metadata file's bytes (sealed or plain JSON) -> SessionMeta. SealingError naming `path` when it is sealed
    under a key not on hand or fails authentication; msgspec errors when it is not metadata."""
    try:
        data = sealer.open(raw, META_PURPOSE)
    except SealingError as exc:
        raise SealingError(f"{path}: {exc}") from exc
    return msgspec.json.decode(data, type=SessionMeta)


def load_meta(base: Path, sealer: Sealer) -> SessionMeta:
    path = meta_path(base)
    return decode_meta(path, path.read_bytes(), sealer)


def encode_meta(meta: SessionMeta, sealer: Sealer) -> bytes:
    return sealer.seal(msgspec.json.format(msgspec.json.encode(meta)), META_PURPOSE)


def write_meta(base: Path, meta: SessionMeta, sealer: Sealer) -> None:
    """Replace the metadata atomically, sealed when encryption is on."""
    atomic_write_bytes(meta_path(base), encode_meta(meta, sealer), mode=0o600)


# -- the archive's format ----------------------------------------------------------------------------------------

def open_archive(path: Path):
    """The archive file opened for reading, never through a link planted in its place (OSError ELOOP)."""
    return os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb")


def file_id(path: Path) -> str | None:
    """The format of the archive at `path` by its first bytes: "" plain gzip, the id of a sealed archive, or None
    (missing, empty, or neither)."""
    try:
        with open_archive(path) as f:
            head = f.read(HEADER_BYTES)
    except (FileNotFoundError, IsADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link planted in its place: never followed (readers refuse it too)
            return None
        raise
    if head.startswith(GZIP_MAGIC):
        return ""
    if head.startswith(ARCHIVE_MAGIC) and len(head) == HEADER_BYTES:
        return head[len(ARCHIVE_MAGIC):].hex()
    return None


def reconcile(base: Path, meta: SessionMeta) -> bool:
    """Make `meta` describe the archive on disk; True when it changed (the caller writes it).

    They differ only after a reseal renamed its rewritten archive into place and was killed before it wrote the
    metadata: the file on disk is then that complete rewrite (same lines, another format or id, another length),
    so the metadata adopts its id and length. Anything else (a file that is missing or in no known format) is
    left for the reader to report."""
    path = archive_path(base)
    found = file_id(path)
    if meta.archive_bytes == 0 or found is None or found == meta.archive_id:
        return False
    meta.archive_id = found
    meta.archive_bytes = os.stat(path).st_size
    return True


def frame(blob: bytes) -> bytes:
    return FRAME_HEAD.pack(len(blob)) + blob


def new_archive_id() -> str:
    return os.urandom(ID_BYTES).hex()


def archive_header(archive_id: str) -> bytes:
    return ARCHIVE_MAGIC + bytes.fromhex(archive_id)


# -- writing -----------------------------------------------------------------------------------------------------

def append_lines(base: Path, meta: SessionMeta, lines: list[str], sealer: Sealer) -> None:
    """Append `lines` (each without its line break) as one gzip member (plain archive) or one frame (sealed
    archive), durably; updates `meta` (lines, archive_bytes, archive_id, sha256) and writes it. Returns once both
    survive a crash. The first capture of a session picks the format new writes have."""
    data = ("\n".join(lines) + "\n").encode()
    path = archive_path(base)
    make_private_dirs(path.parent)
    created = not path.exists()
    member = gzip.compress(data, compresslevel=6, mtime=0)
    if meta.archive_bytes == 0:  # a new archive (or one whose only capture crashed): its format is chosen now
        meta.archive_id = new_archive_id() if sealer.enabled else ""
        head = archive_header(meta.archive_id) if meta.archive_id else b""
    else:
        head = b""
    chunk = head + (frame(sealer.seal(member, ARCHIVE_PURPOSE)) if meta.archive_id else member)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, meta.archive_bytes)  # drops what a crashed capture left without its metadata
        os.lseek(fd, 0, os.SEEK_END)
        write_all(fd, chunk)
        os.fsync(fd)
        meta.archive_bytes = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)
    meta.lines += len(lines)
    meta.sha256 = hashlib.sha256(bytes.fromhex(meta.sha256) + data).hexdigest()
    write_meta(base, meta, sealer)


def write_archive(path: Path, blocks: Iterable[bytes], sealer: Sealer, sealed: bool) -> tuple[str, int]:
    """A whole new archive at `path` (created 0600, replacing any file there, fsynced) holding `blocks` (each
    complete lines), in the sealed format when `sealed`, else plain gzip. Returns (archive_id, length)."""
    archive_id = new_archive_id() if sealed else ""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if sealed:
            write_all(fd, archive_header(archive_id))
        for block in blocks:
            member = gzip.compress(block, compresslevel=6, mtime=0)
            write_all(fd, frame(sealer.seal(member, ARCHIVE_PURPOSE)) if sealed else member)
        os.fsync(fd)
        return archive_id, os.fstat(fd).st_size
    finally:
        os.close(fd)


# -- reading -----------------------------------------------------------------------------------------------------

def stored_bytes(base: Path, meta: SessionMeta) -> bytes:
    """The archive as its metadata counts it (the first `archive_bytes` bytes), as stored."""
    path = archive_path(base)
    with open_archive(path) as f:
        data = f.read(meta.archive_bytes)
    if len(data) < meta.archive_bytes:
        raise ArchiveDamaged(f"{path} is shorter than its metadata says ({len(data)} of {meta.archive_bytes} "
                             "bytes): the archive was damaged; restore it from a backup.")
    return data


def frames(path: Path, data: bytes, archive_id: str) -> Iterator[bytes]:
    """The frames' blobs of a sealed archive's bytes `data` (as stored: sealed, or bare gzip members)."""
    if not data.startswith(archive_header(archive_id)):
        raise ArchiveDamaged(f"{path} does not start as its metadata says (a sealed archive with id {archive_id}): "
                             "the file was replaced or damaged; restore it from a backup.")
    position = HEADER_BYTES
    while position < len(data):
        if position + FRAME_HEAD.size > len(data):
            raise ArchiveDamaged(f"{path} ends inside a frame header at byte {position}: the archive was damaged.")
        (length,) = FRAME_HEAD.unpack_from(data, position)
        position += FRAME_HEAD.size
        if position + length > len(data):
            raise ArchiveDamaged(f"{path} ends inside a frame at byte {position}: the archive was damaged.")
        yield data[position:position + length]
        position += length


def frame_heads(base: Path, meta: SessionMeta) -> Iterator[bytes]:
    """The first bytes of each frame's blob of a sealed archive (enough for `is_sealed` and `needs_reseal`), read
    frame by frame without the rest: telling which key each capture is sealed under costs a seek per capture."""
    path = archive_path(base)
    with open_archive(path) as f:
        if f.read(HEADER_BYTES) != archive_header(meta.archive_id):
            raise ArchiveDamaged(f"{path} does not start as its metadata says (a sealed archive with id "
                                 f"{meta.archive_id}): the file was replaced or damaged; restore it from a backup.")
        position = HEADER_BYTES
        while position < meta.archive_bytes:
            f.seek(position)
            head = f.read(FRAME_HEAD.size + BLOB_HEAD_BYTES)
            if len(head) < FRAME_HEAD.size:
                raise ArchiveDamaged(f"{path} ends inside a frame header at byte {position}: the archive was damaged.")
            (length,) = FRAME_HEAD.unpack_from(head)
            position += FRAME_HEAD.size + length
            if position > meta.archive_bytes:
                raise ArchiveDamaged(f"{path} has a frame running past the length its metadata records: the archive "
                                     "was damaged.")
            yield head[FRAME_HEAD.size:FRAME_HEAD.size + length]


def _raw_lines(base: Path, meta: SessionMeta, sealer: Sealer) -> Iterator[bytes]:
    """Every archived line as stored (bytes, with its line break), up to what the metadata counts."""
    data = stored_bytes(base, meta)
    if not meta.archive_id:
        if data and not data.startswith(GZIP_MAGIC):
            raise ArchiveDamaged(f"{archive_path(base)} is not a gzip archive as its metadata says: the file was "
                                 "replaced or damaged; restore it from a backup.")
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
            yield from stream
        return
    path = archive_path(base)
    for blob in frames(path, data, meta.archive_id):
        try:
            member = sealer.open(blob, ARCHIVE_PURPOSE)
        except SealingError as exc:
            raise SealingError(f"{path}: {exc}") from exc
        yield from io.BytesIO(gzip.decompress(member))


def raw_lines(base: Path, meta: SessionMeta, sealer: Sealer) -> Iterator[bytes]:
    """The metadata's `lines` lines as stored (each with its line break)."""
    return itertools.islice(_raw_lines(base, meta, sealer), meta.lines)


def read_lines(base: Path, meta: SessionMeta, sealer: Sealer, start: int = 0, end: int | None = None
               ) -> Iterator[str]:
    """The archived lines `start` to `end` (the end of what the metadata counts when None)."""
    end = meta.lines if end is None else min(end, meta.lines)
    if start >= end:
        return
    for raw in itertools.islice(_raw_lines(base, meta, sealer), start, end):
        yield raw.decode("utf-8", errors="replace").rstrip("\n")


def meta_paths(root: Path) -> list[Path]:
    """Every session's metadata file under `root` (<agent>/<project>/<name>.meta.json)."""
    return sorted(root.glob(f"*/*/*{META_SUFFIX}")) if root.is_dir() else []


def scan(root: Path, sealer: Sealer, repair: bool = False) -> Iterator[tuple[Path, SessionMeta]]:
    """Every session in the archive under `root`: (base path, metadata describing the file on disk, see
    `reconcile`; with `repair` the reconciled metadata is written back). Metadata that is not metadata is
    skipped; metadata sealed under a key not on hand (or changed on disk) raises SealingError naming its file:
    a wrong key is never mistaken for a missing session."""
    for path in meta_paths(root):
        base = Path(str(path)[: -len(META_SUFFIX)])
        try:
            meta = decode_meta(path, path.read_bytes(), sealer)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            continue
        if reconcile(base, meta) and repair:
            write_meta(base, meta, sealer)
        yield base, meta

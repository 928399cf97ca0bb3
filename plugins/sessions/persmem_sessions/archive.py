"""The session archive on disk: one gzip JSONL file and one metadata file per captured session.

    <home>/sessions/<agent>/<project>/<client>-<session_id>.jsonl.gz    redacted transcript lines
    <home>/sessions/<agent>/<project>/<client>-<session_id>.meta.json   SessionMeta below

Every capture appends one gzip member (a gzip file may hold several; readers see one stream) and fsyncs it,
then replaces the metadata atomically (persmem_core.fileio). The metadata's `archive_bytes` is the length of
the archive as of the last capture that finished: a member written by a capture that crashed before its
metadata is cut off by the next capture and never read, so the line count in the metadata is the truth.
Folders are 0700 and files 0600 from creation: a transcript is as private as what was said in it.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import msgspec

from persmem_core.fileio import atomic_write_bytes, fsync_dir

ARCHIVE_SUFFIX = ".jsonl.gz"
META_SUFFIX = ".meta.json"


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


def load_meta(base: Path) -> SessionMeta:
    return msgspec.json.decode(Path(str(base) + META_SUFFIX).read_bytes(), type=SessionMeta)


def write_meta(base: Path, meta: SessionMeta) -> None:
    atomic_write_bytes(Path(str(base) + META_SUFFIX), msgspec.json.format(msgspec.json.encode(meta)), mode=0o600)


def append_lines(base: Path, meta: SessionMeta, lines: list[str]) -> None:
    """Append `lines` (each without its line break) as one gzip member, durably; updates `meta` (lines,
    archive_bytes, sha256) and writes it. Returns once both survive a crash."""
    data = ("\n".join(lines) + "\n").encode()
    path = Path(str(base) + ARCHIVE_SUFFIX)
    make_private_dirs(path.parent)
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, meta.archive_bytes)  # drops a member a crashed capture left without its metadata
        os.lseek(fd, 0, os.SEEK_END)
        os.write(fd, gzip.compress(data, compresslevel=6, mtime=0))
        os.fsync(fd)
        meta.archive_bytes = os.fstat(fd).st_size
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)
    meta.lines += len(lines)
    meta.sha256 = hashlib.sha256(bytes.fromhex(meta.sha256) + data).hexdigest()
    write_meta(base, meta)


def read_lines(base: Path, meta: SessionMeta, start: int = 0, end: int | None = None) -> Iterator[str]:
    """The archived lines `start` to `end` (the end of what the metadata counts when None)."""
    end = meta.lines if end is None else min(end, meta.lines)
    if start >= end:
        return
    with open(str(base) + ARCHIVE_SUFFIX, "rb") as f:
        data = f.read(meta.archive_bytes)
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
        for number, raw in enumerate(stream):
            if number >= end:
                return
            if number >= start:
                yield raw.decode("utf-8", errors="replace").rstrip("\n")


def scan(root: Path) -> Iterator[tuple[Path, SessionMeta]]:
    """Every session in the archive under `root`: (base path, metadata). Unreadable metadata is skipped."""
    if not root.is_dir():
        return
    for meta_path in sorted(root.glob(f"*/*/*{META_SUFFIX}")):
        base = Path(str(meta_path)[: -len(META_SUFFIX)])
        try:
            yield base, load_meta(base)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            continue

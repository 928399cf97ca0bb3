"""A checkpoint of what opening a collection rebuilds from its log, so a restart reads it instead of the log.

Replaying the log decodes every frame (texts and float32 vectors), puts every memory into the rows (heads,
columns, tag sets, links) and tokenises and stems every text for BM25: ~10 s at 100,000 memories. The checkpoint
holds the result: the whole `Rows` (every attribute, BM25 index included), the vector index's int8 copy and the
log's dead bytes, as of a log offset. On open it is loaded and only the log after that offset is replayed, with
the same per-entry code (store/replay.py), so `Rows.put` and `Rows.remove` stay the only way rows change. The hnswlib
graph is not in it: it has its own saved file (store/vectors.py), with its own offset.

File `checkpoint.bin`: MAGIC, a u64 length, a MessagePack `State` (the Python structures, and a table of the
numpy arrays), then the arrays' raw bytes (read back with np.frombuffer: no per-element Python work). Only the
used part of each array is stored (the spare capacity is zeros, made again on load, untouched and so not
resident). Sealed whole as a stream (purpose b"memory.checkpoint") when encryption is on: its plaintext is only
ever in memory. The sidecar `checkpoint.meta.json` (plain, no text) holds the sha256 of the file as stored, the
model id, dim, format version, log offset, and the CRC-32 of the log up to that offset (0.04 s for 200 MB): a
checkpoint is only applied to the very bytes it was made from, and a log damaged anywhere before its offset is
replayed whole, which cuts it at the damage, as without a checkpoint. Anything that does not match is ignored
(logged) and the log is replayed whole, as before checkpoints: it is a cache of the log, never the truth.

What changes log offsets (a compaction, a reindex, `persmem key migrate|rotate`) drops the checkpoint first
(`drop`, fsynced), before the log file is replaced: a kill in between leaves no checkpoint, never a stale one.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import struct
import time
import weakref
import zlib
from array import array
from pathlib import Path

import msgspec
import numpy as np

from persmem_core.sdk import HEADER_BYTES, Sealer, SealingError, atomic_write_bytes, fsync_dir, is_sealed, open_private

from .lexical import BM25Index
from .records import Head
from .rows import Codes, Rows
from .vectors import VectorIndex

log = logging.getLogger("persmem.memory")

CHECKPOINT_NAME = "checkpoint.bin"
META_SUFFIX = ".meta.json"
PURPOSE = b"memory.checkpoint"  # what the checkpoint is sealed as
FORMAT = 3  # raise when State or the arrays change meaning: older checkpoints are then ignored
MAGIC = b"PMCKPT\x00\x01"
_LENGTH = struct.Struct("<Q")

# Every attribute of Rows and of BM25Index, and how the checkpoint carries it (tests compare these with vars():
# an attribute added to either class without a place here fails them, so nothing is silently left out).
ROWS_SAVED = ("at_row", "by_hash", "tag_rows", "next_label", "applied_seq", "unembedded", "successor_of",
              "consolidated_into",
              "_successors", "_consolidators", "undone_links", "projects", "types", "authors", "_strings")
ROWS_DERIVED = ("heads", "row_of")  # from at_row: the live rows in row order (as put/_retire leave them)
ROWS_ARRAYS = ("label_row", "project", "type", "author", "created", "alive", "question", "first_label",
               "label_count", "log_start", "log_end")
ROWS_NESTED = ("lexical",)
BM25_SAVED = ("_term_id", "_delta", "_delta_size", "n_alive", "total_len", "scope_alive", "scope_len")
BM25_ARRAYS = ("_offsets", "_rows", "_tfs", "_doc_len", "_alive")
BM25_DERIVED = ("_scope",)  # each row's scope is its author's code: the rows' `author` column
BM25_FRESH = ("analyzer",)  # a new Analyzer: its stem cache only saves time
VECTOR_ARRAYS = ("_q", "_scale")


class ArrayInfo(msgspec.Struct, array_like=True):
    name: str
    dtype: str
    shape: list[int]  # as in memory (capacity included)
    used: int  # leading rows stored; the rest are zeros
    offset: int  # in the array section
    nbytes: int


class State(msgspec.Struct, kw_only=True):
    format: int
    model_id: str
    dim: int
    log_offset: int
    dead_bytes: int
    # Heads without their repeated strings (project, type, author: "" and tags: (), which decode to no new
    # object): those come from the rows' code columns and the arrays "tag_counts"/"tag_ids" (into `strings`), so
    # a load makes no string it then drops (freed small objects scattered among the heads stay resident).
    at_row: list[Head | None]
    by_hash_other: dict[int, str]  # by_hash entries whose id is not live (none expected); the rest are arrays
    tag_rows: dict[str, set[int]]
    next_label: int
    unembedded: set[str]
    successor_of: dict[str, str]
    consolidated_into: dict[str, str]
    successors: dict[str, set[str]]
    consolidators: dict[str, set[str]]
    undone_links: dict[str, frozenset[str]]
    projects: dict[str, int]
    types: dict[str, int]
    authors: dict[str, int]
    strings: list[str]
    terms: list[str]  # BM25 terms in id order (ids are 0 .. n-1, given in order)
    delta: dict[int, tuple[bytes, bytes]]  # BM25 postings not merged yet: term id -> (rows int32, tfs float32)
    delta_size: int
    n_alive: int
    total_len: float
    arrays: list[ArrayInfo]
    applied_seq: int = 0  # Rows.applied_seq (a replicated collection's place in the memory stream)
    # BM25 statistics per scope (store/lexical.py); None in a checkpoint written before they existed: counted on load
    scope_alive: dict[int, int] | None = None
    scope_len: dict[int, float] | None = None


class CheckpointMeta(msgspec.Struct, kw_only=True):
    format: int
    sha256: str  # of the file as stored (sealed or not)
    model_id: str
    dim: int
    log_offset: int
    log_crc32: int  # of the log's bytes up to log_offset
    memories: int


_state_decoder = msgspec.msgpack.Decoder(State)
_encoder = msgspec.msgpack.Encoder()


def checkpoint_path(folder: Path) -> Path:
    return Path(folder) / CHECKPOINT_NAME


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + META_SUFFIX)


# -- saving ---------------------------------------------------------------------------------------------------
def save(folder: Path, rows: Rows, vectors: VectorIndex, log_path: Path, log_offset: int, dead_bytes: int,
         model_id: str, sealer: Sealer | None) -> None:
    """Write the checkpoint of `rows` and `vectors` as of `log_offset` in the log `log_path` (temp file, fsync,
    rename, then the sidecar). The caller holds the collection's write lock. OSError: the old one is dropped
    (it may no longer fit) and nothing else changed."""
    path = checkpoint_path(folder)
    if rows in _diverged:  # rows renumbered by a compaction or reindex: saved again after the next open
        return
    log_crc = _prefix_crc(log_path, log_offset)
    if log_crc is None:  # the log is shorter than that (it should not be): no checkpoint rather than a wrong one
        drop(folder)
        return
    arrays: list[tuple[str, np.ndarray, int]] = []
    for name in ROWS_ARRAYS:
        arrays.append((name, getattr(rows, name), _used(getattr(rows, name))))
    lexical = rows.lexical
    for name in ("_offsets", "_rows", "_tfs"):
        arrays.append((name, getattr(lexical, name), len(getattr(lexical, name))))
    arrays.append(("_doc_len", np.frombuffer(lexical._doc_len, dtype=np.float32), len(lexical._doc_len)))
    arrays.append(("_alive", np.frombuffer(lexical._alive, dtype=np.uint8), len(lexical._alive)))
    used_labels = _used(vectors._scale)
    arrays.append(("_q", vectors._q, used_labels))
    arrays.append(("_scale", vectors._scale, used_labels))
    # Heads as stored: their repeated strings left out (see State.at_row); tags as string numbers.
    number = {value: i for i, value in enumerate(rows._strings)}
    tag_counts = np.zeros(len(rows.at_row), dtype=np.int32)
    tag_ids: list[int] = []
    bare: list[Head | None] = []
    blank = {"project": "", "type": "", "author": "", "tags": ()}
    for row, head in enumerate(rows.at_row):
        if head is None:
            bare.append(None)
            continue
        if head.tags:
            tag_counts[row] = len(head.tags)
            tag_ids.extend(number[tag] for tag in head.tags)
        bare.append(msgspec.structs.replace(head, **blank))
    arrays.append(("tag_counts", tag_counts, len(tag_counts)))
    arrays.append(("tag_ids", np.array(tag_ids, dtype=np.int32), len(tag_ids)))
    row_of = rows.row_of
    hash_keys, hash_rows, hash_other = [], [], {}  # no tuple per entry: 100,000 of them wake the cyclic collector
    for key, memory_id in rows.by_hash.items():
        row = row_of.get(memory_id)
        if row is None:
            hash_other[key] = memory_id
        else:
            hash_keys.append(key)
            hash_rows.append(row)
    arrays.append(("by_hash_keys", np.array(hash_keys, dtype=np.uint64), len(hash_keys)))
    arrays.append(("by_hash_rows", np.array(hash_rows, dtype=np.int32), len(hash_rows)))
    table, position = [], 0
    for name, values, used in arrays:
        nbytes = used * (values.itemsize * int(np.prod(values.shape[1:], dtype=np.int64)))
        table.append(ArrayInfo(name=name, dtype=values.dtype.str, shape=list(values.shape), used=used,
                               offset=position, nbytes=nbytes))
        position += nbytes
    state = State(
        format=FORMAT, model_id=model_id, dim=vectors.dim, log_offset=log_offset, dead_bytes=dead_bytes,
        at_row=bare, by_hash_other=hash_other, tag_rows=rows.tag_rows, next_label=rows.next_label,
        applied_seq=rows.applied_seq, unembedded=rows.unembedded, successor_of=rows.successor_of,
        consolidated_into=rows.consolidated_into,
        successors=rows._successors, consolidators=rows._consolidators, undone_links=rows.undone_links,
        projects=rows.projects.code, types=rows.types.code, authors=rows.authors.code, strings=list(rows._strings),
        terms=list(lexical._term_id),
        delta={tid: (r.tobytes(), t.tobytes()) for tid, (r, t) in lexical._delta.items()},
        delta_size=lexical._delta_size, n_alive=lexical.n_alive, total_len=lexical.total_len, arrays=table,
        scope_alive=lexical.scope_alive, scope_len=lexical.scope_len)
    encoded = _encoder.encode(state)
    pieces = [MAGIC, _LENGTH.pack(len(encoded)), encoded]
    pieces += [memoryview(np.ascontiguousarray(values[:used]).reshape(-1).view(np.uint8)) for _, values, used in arrays]
    tmp = path.with_name(path.name + ".tmp")
    digest = hashlib.sha256()
    try:
        with open_private(tmp) as out:
            if sealer is not None and sealer.enabled:  # plaintext only in memory: sealed on its way to the file
                plain = io.BytesIO()
                for piece in pieces:
                    plain.write(piece)
                plain.seek(0)
                sealed = _HashingWriter(out, digest)
                sealer.seal_stream(plain, sealed, PURPOSE)
                del plain
            else:
                for piece in pieces:
                    digest.update(piece)
                    out.write(piece)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    meta = CheckpointMeta(format=FORMAT, sha256=digest.hexdigest(), model_id=model_id, dim=vectors.dim,
                          log_offset=log_offset, log_crc32=log_crc, memories=len(rows.heads))
    # The old sidecar goes first: a kill before the new one is written leaves a checkpoint nothing vouches for.
    meta_path(path).unlink(missing_ok=True)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    atomic_write_bytes(meta_path(path), msgspec.json.encode(meta))


class _HashingWriter:
    """A file wrapper that hashes what is written through it (the sidecar's sha256 of the file as stored)."""

    def __init__(self, out, digest):
        self.out, self.digest = out, digest

    def write(self, data) -> int:
        self.digest.update(data)
        return self.out.write(data)


# Rows that no longer are what a replay of their log gives: a compaction keeps the dead rows of the entries it
# dropped (and a reindex puts every memory again), where a replay of the new log has none. A checkpoint of them
# would carry those dead rows over every restart; none is saved until the collection is opened again (a replay
# of the compacted log, then a checkpoint of that).
_diverged: weakref.WeakSet = weakref.WeakSet()


def drop(folder: Path, rows: Rows | None = None) -> None:
    """Remove the checkpoint (and its sidecar), durably: before anything that changes the log's offsets. With
    `rows` (a compaction or reindex is about to renumber the log under them), no checkpoint is saved of those
    rows any more (`_diverged`)."""
    if rows is not None:
        _diverged.add(rows)
    path = checkpoint_path(folder)
    found = False
    for stale in (meta_path(path), path, path.with_name(path.name + ".tmp")):
        try:
            stale.unlink()
            found = True
        except FileNotFoundError:
            pass
    if found:
        fsync_dir(Path(folder))


def _used(values: np.ndarray) -> int:
    """How many leading rows of `values` to store: the rest are zeros (np.zeros spare capacity)."""
    if values.ndim == 1:
        nonzero = np.flatnonzero(values)
    else:
        nonzero = np.flatnonzero(values.any(axis=tuple(range(1, values.ndim))))
    return int(nonzero[-1]) + 1 if len(nonzero) else 0


# -- the log it was made from ---------------------------------------------------------------------------------
def _prefix_crc(log_path: Path, length: int) -> int | None:
    """CRC-32 of the log's first `length` bytes; None when it is shorter."""
    crc, left = 0, length
    try:
        with open(log_path, "rb") as f:
            while left:
                block = f.read(min(left, 8 << 20))
                if not block:
                    return None
                crc = zlib.crc32(block, crc)
                left -= len(block)
    except FileNotFoundError:
        return None if length else 0
    return crc


# -- loading --------------------------------------------------------------------------------------------------
class Loaded(msgspec.Struct):
    log_offset: int
    dead_bytes: int
    timings: dict[str, float]


def load(folder: Path, rows: Rows, vectors: VectorIndex, log_path: Path, *, model_id: str,
         sealer: Sealer | None) -> Loaded | None:
    """Fill the empty `rows` and `vectors` (its int8 copy) from the checkpoint, if there is one that fits this
    log, model and format; None otherwise (logged; then replay the whole log). SealingError (naming the file)
    when it is sealed under a key that is not on hand, as for the index."""
    path = checkpoint_path(folder)
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    try:
        meta = msgspec.json.decode(meta_path(path).read_bytes(), type=CheckpointMeta)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.warning("%s: sidecar unreadable (%s); replaying the whole log", path, exc)
        return None
    try:
        log_size = os.path.getsize(log_path)
    except FileNotFoundError:
        log_size = 0
    if meta.format != FORMAT or meta.model_id != model_id or meta.dim != vectors.dim or meta.log_offset > log_size:
        log.warning("%s: made for another format, model or a longer log; replaying the whole log", path)
        return None
    if _prefix_crc(log_path, meta.log_offset) != meta.log_crc32:
        log.warning("%s: made from another log, or the log changed before offset %d; replaying the whole log",
                    path, meta.log_offset)
        return None
    try:
        with open(path, "rb") as f:
            stored = bytearray(os.fstat(f.fileno()).st_size)
            got = f.readinto(stored)
    except OSError as exc:
        log.warning("%s: unreadable (%s); replaying the whole log", path, exc)
        return None
    if got != len(stored) or hashlib.sha256(stored).hexdigest() != meta.sha256:
        log.warning("%s: checksum mismatch; replaying the whole log", path)
        return None
    timings["read"] = time.perf_counter() - clock
    if is_sealed(stored[:HEADER_BYTES]):
        clock = time.perf_counter()
        plain = io.BytesIO()
        try:
            (sealer or Sealer.plain()).open_stream(io.BytesIO(stored), plain, PURPOSE)
        except SealingError as exc:
            raise SealingError(f"{path}: {exc}") from None
        del stored
        data = plain.getbuffer()
        timings["unseal"] = time.perf_counter() - clock
    else:
        data = memoryview(stored)
    try:
        return _fill(data, meta, rows, vectors, timings)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, KeyError, IndexError, TypeError) as exc:
        log.warning("%s: does not decode (%s); replaying the whole log", path, exc)
        return None


def _fill(data: memoryview, meta: CheckpointMeta, rows: Rows, vectors: VectorIndex,
          timings: dict[str, float]) -> Loaded:
    clock = time.perf_counter()
    if bytes(data[: len(MAGIC)]) != MAGIC:
        raise ValueError("not a checkpoint")
    (length,) = _LENGTH.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + _LENGTH.size
    state = _state_decoder.decode(data[start : start + length])
    if (state.format, state.model_id, state.dim, state.log_offset) != (meta.format, meta.model_id, meta.dim,
                                                                        meta.log_offset):
        raise ValueError("the checkpoint and its sidecar disagree")
    timings["decode"] = time.perf_counter() - clock
    clock = time.perf_counter()
    body = start + length
    arrays = {}
    for info in state.arrays:
        dtype = np.dtype(info.dtype)
        shape = tuple(info.shape)
        if info.used > shape[0] or body + info.offset + info.nbytes > len(data):
            raise ValueError(f"array {info.name} does not fit the file")
        values = np.zeros(shape, dtype=dtype)  # spare rows stay untouched, as np.zeros capacity does
        stored = np.frombuffer(data, dtype=dtype, count=info.nbytes // dtype.itemsize, offset=body + info.offset)
        values[: info.used] = stored.reshape((info.used, *shape[1:]))
        arrays[info.name] = values
    del data
    if arrays["_q"].shape[1:] != (vectors.dim,):
        raise ValueError("vectors of another dimension")
    timings["arrays"] = time.perf_counter() - clock

    clock = time.perf_counter()
    strings = {s: s for s in state.strings}  # one copy of each project, type, author and tag, as head_of shares
    named = list(strings)
    projects, types, authors = (list(code) for code in (state.projects, state.types, state.authors))
    for codes, values in ((state.projects, projects), (state.types, types), (state.authors, authors)):
        if list(codes.values()) != list(range(len(codes))):
            raise ValueError("codes out of order")
        values[:] = [strings.get(value, value) for value in values]
    at_row = state.at_row
    project_of, type_of, author_of = (arrays[name][: len(at_row)].tolist() for name in ("project", "type", "author"))
    tag_counts, tag_ids = arrays["tag_counts"].tolist(), arrays["tag_ids"].tolist()
    heads: dict[str, Head] = {}
    row_of: dict[str, int] = {}
    at = 0
    for row, head in enumerate(at_row):
        if head is None:
            continue
        head.project, head.type, head.author = projects[project_of[row]], types[type_of[row]], authors[author_of[row]]
        count = tag_counts[row]
        if count:
            head.tags = tuple([named[i] for i in tag_ids[at : at + count]])
            at += count
        heads[head.id] = head
        row_of[head.id] = row
    by_hash = dict(zip(arrays["by_hash_keys"].tolist(), [at_row[r].id for r in arrays["by_hash_rows"].tolist()]))
    by_hash.update(state.by_hash_other)
    fields = {
        "heads": heads, "row_of": row_of, "at_row": at_row, "by_hash": by_hash,
        "tag_rows": state.tag_rows, "next_label": state.next_label, "applied_seq": state.applied_seq,
        "unembedded": state.unembedded,
        "successor_of": state.successor_of, "consolidated_into": state.consolidated_into,
        "_successors": state.successors, "_consolidators": state.consolidators, "undone_links": state.undone_links,
        "projects": _codes(state.projects), "types": _codes(state.types), "authors": _codes(state.authors),
        "_strings": strings, **{name: arrays[name] for name in ROWS_ARRAYS},
    }
    timings["rows"] = time.perf_counter() - clock
    clock = time.perf_counter()
    lexical = BM25Index()
    lexical._term_id = dict(zip(state.terms, range(len(state.terms))))
    lexical._offsets, lexical._rows, lexical._tfs = arrays["_offsets"], arrays["_rows"], arrays["_tfs"]
    lexical._delta = {tid: (array("i", r), array("f", t)) for tid, (r, t) in state.delta.items()}
    lexical._delta_size, lexical.n_alive, lexical.total_len = state.delta_size, state.n_alive, state.total_len
    lexical._doc_len = array("f", arrays["_doc_len"].tobytes())
    lexical._alive = bytearray(arrays["_alive"].tobytes())
    if len(lexical._doc_len) > len(arrays["author"]):
        raise ValueError("BM25 rows do not fit the rows")
    scopes = arrays["author"][: len(lexical._doc_len)].astype(np.int32)
    lexical._scope = array("i", scopes.tobytes())
    if state.scope_alive is None or state.scope_len is None:  # an older checkpoint: count them
        alive = np.frombuffer(lexical._alive, dtype=np.uint8).astype(bool)
        live = scopes[alive]
        counts = np.bincount(live)
        lengths = np.bincount(live, weights=np.frombuffer(lexical._doc_len, dtype=np.float32)[alive])
        lexical.scope_alive = {s: int(counts[s]) for s in np.flatnonzero(counts).tolist()}
        lexical.scope_len = {s: float(lengths[s]) for s in lexical.scope_alive}
    else:
        lexical.scope_alive, lexical.scope_len = state.scope_alive, state.scope_len
    offsets = lexical._offsets
    if len(offsets) > len(state.terms) + 1 or (len(offsets) and offsets[-1] != len(lexical._rows)):
        raise ValueError("BM25 postings do not fit their terms")
    fields["lexical"] = lexical
    timings["bm25"] = time.perf_counter() - clock
    for name, value in fields.items():
        setattr(rows, name, value)
    vectors._q, vectors._scale = arrays["_q"], arrays["_scale"]
    return Loaded(log_offset=meta.log_offset, dead_bytes=state.dead_bytes, timings=timings)


def _codes(code: dict[str, int]) -> Codes:
    codes = Codes()
    codes.code = code
    return codes

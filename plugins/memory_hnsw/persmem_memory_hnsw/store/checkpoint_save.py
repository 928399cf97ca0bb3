"""Writing a collection's checkpoint (checkpoint.py: the format): the rows, BM25 and the int8 vectors as of a log
offset, as one file (temp file, fsync, rename; sealed as a stream when encryption is on), then its sidecar.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import msgspec
import numpy as np

from persmem_core.sdk import Sealer, atomic_write_bytes, fsync_dir, open_private

from .checkpoint import (FORMAT, LENGTH, MAGIC, PURPOSE, ROWS_ARRAYS, ArrayInfo, CheckpointMeta, State, checkpoint_path,
                         diverged_rows, drop, meta_path, prefix_crc)
from .records import Head
from .rows import Rows
from .vectors import VectorIndex

_encoder = msgspec.msgpack.Encoder()


def save(folder: Path, rows: Rows, vectors: VectorIndex, log_path: Path, log_offset: int, dead_bytes: int,
         model_id: str, sealer: Sealer | None, log_crc: int | None = None) -> None:
    """Write the checkpoint of `rows` and `vectors` as of `log_offset` in the log `log_path` (temp file, fsync,
    rename, then the sidecar). `log_crc`: the CRC-32 of the log up to there, as the log kept it while written
    (None: read the log for it). The caller holds the collection's write lock. OSError: the old one is dropped
    (it may no longer fit) and nothing else changed."""
    path = checkpoint_path(folder)
    if rows in diverged_rows:  # rows renumbered by a compaction or reindex: saved again after the next open
        return
    if log_crc is None:
        log_crc = prefix_crc(log_path, log_offset)
    if log_crc is None:  # the log is shorter than that (it should not be): no checkpoint rather than a wrong one
        drop(folder)
        return
    arrays = _column_arrays(rows, vectors)
    bare, tag_counts, tag_ids = _bare_heads(rows)
    arrays.append(("tag_counts", tag_counts, len(tag_counts)))
    arrays.append(("tag_ids", np.array(tag_ids, dtype=np.int32), len(tag_ids)))
    hash_keys, hash_rows, hash_other = _hash_rows(rows)
    arrays.append(("by_hash_keys", np.array(hash_keys, dtype=np.uint64), len(hash_keys)))
    arrays.append(("by_hash_rows", np.array(hash_rows, dtype=np.int32), len(hash_rows)))
    state = _state(rows, vectors, model_id, log_offset, dead_bytes, bare, hash_other, _table(arrays))
    encoded = _encoder.encode(state)
    pieces = [MAGIC, LENGTH.pack(len(encoded)), encoded]
    pieces += [memoryview(np.ascontiguousarray(values[:used]).reshape(-1).view(np.uint8)) for _, values, used in arrays]
    tmp = path.with_name(path.name + ".tmp")
    digest = _write_file(tmp, pieces, sealer)
    meta = CheckpointMeta(format=FORMAT, sha256=digest, model_id=model_id, dim=vectors.dim,
                          log_offset=log_offset, log_crc32=log_crc, memories=len(rows.heads))
    # The old sidecar goes first: a kill before the new one is written leaves a checkpoint nothing vouches for.
    meta_path(path).unlink(missing_ok=True)
    os.replace(tmp, path)
    fsync_dir(path.parent)
    atomic_write_bytes(meta_path(path), msgspec.json.encode(meta))


def _column_arrays(rows: Rows, vectors: VectorIndex) -> list[tuple[str, np.ndarray, int]]:
    """The rows' numpy columns, BM25's postings and lengths, and the int8 vectors: (name, array, rows to store)."""
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
    return arrays


def _bare_heads(rows: Rows) -> tuple[list[Head | None], np.ndarray, list[int]]:
    """Heads as stored: their repeated strings left out (see State.at_row); tags as string numbers (each row's
    count, and the numbers of every row's tags one after another)."""
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
    return bare, tag_counts, tag_ids


def _hash_rows(rows: Rows) -> tuple[list[int], list[int], dict[int, str]]:
    """The content-hash index as two columns (hash, row) for live ids, and a dict of the others (none expected)."""
    row_of = rows.row_of
    hash_keys, hash_rows, hash_other = [], [], {}  # no tuple per entry: 100,000 of them wake the cyclic collector
    for key, memory_id in rows.by_hash.items():
        row = row_of.get(memory_id)
        if row is None:
            hash_other[key] = memory_id
        else:
            hash_keys.append(key)
            hash_rows.append(row)
    return hash_keys, hash_rows, hash_other


def _table(arrays: list[tuple[str, np.ndarray, int]]) -> list[ArrayInfo]:
    """Where each array's stored rows lie in the array section, one after another."""
    table, position = [], 0
    for name, values, used in arrays:
        nbytes = used * (values.itemsize * int(np.prod(values.shape[1:], dtype=np.int64)))
        table.append(ArrayInfo(name=name, dtype=values.dtype.str, shape=list(values.shape), used=used,
                               offset=position, nbytes=nbytes))
        position += nbytes
    return table


def _state(rows: Rows, vectors: VectorIndex, model_id: str, log_offset: int, dead_bytes: int,
           bare: list[Head | None], hash_other: dict[int, str], table: list[ArrayInfo]) -> State:
    lexical = rows.lexical
    return State(
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


def _write_file(tmp: Path, pieces: list, sealer: Sealer | None) -> str:
    """Write `pieces` to `tmp` (sealed when `sealer` is enabled) and fsync it; the sha256 of the file as stored.
    Removed again on any failure."""
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
    return digest.hexdigest()


class _HashingWriter:
    """A file wrapper that hashes what is written through it (the sidecar's sha256 of the file as stored)."""

    def __init__(self, out, digest):
        self.out, self.digest = out, digest

    def write(self, data) -> int:
        self.digest.update(data)
        return self.out.write(data)


def _used(values: np.ndarray) -> int:
    """How many leading rows of `values` to store: the rest are zeros (np.zeros spare capacity)."""
    if values.ndim == 1:
        nonzero = np.flatnonzero(values)
    else:
        nonzero = np.flatnonzero(values.any(axis=tuple(range(1, values.ndim))))
    return int(nonzero[-1]) + 1 if len(nonzero) else 0

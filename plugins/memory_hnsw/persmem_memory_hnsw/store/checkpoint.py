"""A checkpoint of what opening a collection rebuilds from its log, so a restart reads it instead of the log.

Replaying the log decodes every frame (texts and float32 vectors), puts every memory into the rows (heads,
columns, tag sets, links) and tokenises and stems every text for BM25: ~10 s at 100,000 memories. The checkpoint
holds the result: the whole `Rows` (every attribute, BM25 index included), the vector index's int8 copy and the
log's dead bytes, as of a log offset. On open it is loaded and only the log after that offset is replayed, with
the same per-entry code (store/replay.py), so `Rows.put` and `Rows.remove` stay the only way rows change. The hnswlib
graph is not in it: it has its own saved file (store/vectors.py), with its own offset.

File `checkpoint.bin`: MAGIC, a u64 length, a MessagePack `State` (the Python structures, and a table of the numpy
arrays), then the arrays' raw bytes (read back with np.frombuffer: no per-element Python work). Only the used part
of each array is stored (the spare capacity is zeros, made again on load, untouched and so not resident). Sealed
whole as a stream (purpose b"memory.checkpoint") when encryption is on: its plaintext is only ever in memory. The
sidecar `checkpoint.meta.json` (plain, no text) holds the sha256 of the file as stored, the model id, dim, format
version, log offset, and the CRC-32 of the log up to that offset: a checkpoint is only applied to the very bytes it
was made from, and a log damaged anywhere before its offset is replayed whole, which cuts it at the damage, as
without a checkpoint. Anything that does not match is ignored (logged) and the log is replayed whole, as before
checkpoints: it is a cache of the log, never the truth. The log keeps that CRC up to date as it writes frames
(RecordLog.crc), starting from the one an open checked, so a save reads nothing back (it read the whole log under
the write lock: ~0.2 s at 100k memories); only an open reads the log's bytes before the offset (2.4 GB/s of CRC,
plus reading them).

What changes log offsets (a compaction, a reindex, `persmem key migrate|rotate`) drops the checkpoint first
(`drop`, fsynced), before the log file is replaced: a kill in between leaves no checkpoint, never a stale one.

This module is the format and the file's life (its names, what it holds, dropping it, the log it was made from);
checkpoint_save.py writes it, checkpoint_load.py reads it back into empty rows.
"""

from __future__ import annotations

import struct
import weakref
import zlib
from pathlib import Path

import msgspec

from persmem_core.sdk import fsync_dir

from .records import Head
from .rows import Rows

CHECKPOINT_NAME = "checkpoint.bin"
META_SUFFIX = ".meta.json"
PURPOSE = b"memory.checkpoint"  # what the checkpoint is sealed as
FORMAT = 3  # raise when State or the arrays change meaning: older checkpoints are then ignored
MAGIC = b"PMCKPT\x00\x01"
LENGTH = struct.Struct("<Q")

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


def checkpoint_path(folder: Path) -> Path:
    return Path(folder) / CHECKPOINT_NAME


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + META_SUFFIX)


# Rows that no longer are what a replay of their log gives: a compaction keeps the dead rows of the entries it
# dropped (and a reindex puts every memory again), where a replay of the new log has none. A checkpoint of them
# would carry those dead rows over every restart; none is saved until the collection is opened again (a replay
# of the compacted log, then a checkpoint of that).
diverged_rows: weakref.WeakSet = weakref.WeakSet()


def drop(folder: Path, rows: Rows | None = None) -> None:
    """Remove the checkpoint (and its sidecar), durably: before anything that changes the log's offsets. With
    `rows` (a compaction or reindex is about to renumber the log under them), no checkpoint is saved of those
    rows any more (`diverged_rows`)."""
    if rows is not None:
        diverged_rows.add(rows)
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


# -- the log it was made from ---------------------------------------------------------------------------------
def prefix_crc(log_path: Path, length: int) -> int | None:
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


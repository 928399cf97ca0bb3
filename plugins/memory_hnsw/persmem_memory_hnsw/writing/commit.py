"""The end of every write: log the entries (durably, or fsynced later by group commit), then apply them to the
rows and the vector index; upkeep (compaction, index saves) after.

A write that returned is in the log; everything else can be rebuilt from it (store/replay.py, on open). A failed
write leaves the log as it was and says nothing was stored. On a cluster the entries are published to the memory
stream first (cluster/replication.py). `c` is the Collection, its write lock held unless said otherwise.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from ..store.log import WriteFailed, write_failed
from ..store.records import Memory, Put

log = logging.getLogger("persmem.memory")


def commit(c, puts: list[Put], pending: list[tuple[Memory, np.ndarray]], *, sync: bool = True,
            seq: int | None = None) -> int:
    """Log, then apply to the rows and the index; returns the log offset after the entries. With `sync`, the
    entries are durable on return; without, the caller releases the lock and calls `sync` with that offset
    before acknowledging them. A memory whose `vecs` are empty (none of its labels) waits for the background
    embedder. `seq`: applying a write from the memory stream (writing/from_stream.py). Caller holds the write lock."""
    if not puts:
        return 0
    spans = append(c, puts, sync=sync, seq=seq)  # raises: nothing applied, nothing acknowledged
    for (memory, vecs), span in zip(pending, spans, strict=True):
        if memory.id in c.memories:
            c.log.dead_bytes += c.rows.span_bytes(memory.id)
        was_pending = memory.id in c.rows.unembedded
        embedded = len(vecs) == len(memory.labels)
        old, head = c.rows.put(memory, span, embedded=embedded)
        if old is not None and old.labels != memory.labels:
            c.vectors.remove(old.labels)  # labels never embedded are not in the graph: nothing to do
        if not embedded:
            continue
        if old is None or old.labels != memory.labels or was_pending:
            c.vectors.add(memory.labels, vecs)
        elif old.dedup_key != head.dedup_key:  # new text (or project) under the same labels
            c.vectors.replace(memory.labels, vecs)
    c.changes_since_save += len(puts)
    maintain(c)
    return spans[-1][1]

def append(c, entries: list, *, sync: bool = True, seq: int | None = None) -> list[tuple[int, int]]:
    """Log (durably with `sync`). A failed write (disk full, I/O error) leaves the log as it was and is
    reported as a UserError saying nothing was stored. On a cluster, the entries are first published to the
    memory stream (Behind when another node wrote first; ReplicationFailed when the cluster does not take
    them): `seq` is where they are in it, given when they come from the stream (writing/from_stream.py)."""
    published = seq is None and c.replication is not None
    if published:
        seq = c.replication.publish(c.name, entries, c.rows.applied_seq)
    if seq is not None:
        for entry in entries:
            entry.seq = seq
        c.stream.since_snapshot += len(entries)
    try:
        spans = c.log.append(entries) if sync else c.log.write(entries)
        if published:  # (a write from the stream counts as applied once all its entries are: apply_replicated)
            c.stream.applied_to(seq)
        return spans
    except OSError as exc:
        log.error("collection %s: could not append to %s: %s", c.name, c.log.path, exc)
        if sync:
            recover_log(c)
        if seq is not None:  # the cluster has it: the other nodes apply it, and this one when it can
            raise WriteFailed(write_failed(c.folder, exc, "the cluster stored this write, but this node could "
                                           "not log it; the other nodes have it, and this node applies it once "
                                           "it can write again (restart it)")) from None
        raise WriteFailed(write_failed(c.folder, exc, "nothing was stored or changed")) from None

def sync(c, end: int, stored: list[str]) -> None:
    """Return once the log is on the disk up to `end` (group commit: log.sync_to). No lock held. If the
    fsync fails, the log is cut back to its last fsynced frame and the memories `stored` (written by the
    caller, applied already) are taken out again: the caller is told nothing was stored, and nothing was."""
    if not end or c.replication is not None:  # on a cluster the stream holds it (a crash re-applies it)
        return
    try:
        c.log.sync_to(end)
    except OSError as exc:
        log.error("collection %s: could not fsync %s: %s", c.name, c.log.path, exc)
        with c.lock.gen_wlock():
            recover_log(c)
            for memory_id in stored:
                if memory_id in c.memories and c.rows.span(memory_id)[1] > c.log.synced:
                    c.vectors.remove(c.rows.remove(memory_id).labels)
        raise WriteFailed(write_failed(c.folder, exc, "nothing was stored")) from None

def recover_log(c) -> None:
    """Cut the log back to its last fsynced frame after a failed fsync (log.recover). Write lock held."""
    try:
        c.log.recover()
    except OSError as exc:
        log.error("collection %s: could not cut %s back after a failed fsync (%s); it takes no writes until "
                  "the server is restarted", c.name, c.log.path, exc)

def maintain(c) -> None:
    """Compact the log when most of it is superseded; save the index now and then. Write lock held.
    Both are optional upkeep after an acknowledged write: if one fails (say the disk is full) the write
    still stands, and the upkeep is tried again a minute later."""
    if time.monotonic() < c.upkeep_after:
        return
    try:
        if c.log.dead_bytes > max(1 << 20, c.log.size // 2):
            c.compact()
        elif c.changes_since_save >= c.config.save_index_every:
            c.save_index()
    except OSError as exc:
        c.upkeep_after = time.monotonic() + 60.0
        log.warning("collection %s: compaction or index save failed (%s); the log is intact, retrying later",
                    c.name, exc)

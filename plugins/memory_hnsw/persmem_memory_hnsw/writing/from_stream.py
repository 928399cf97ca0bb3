"""Writes that come from the memory stream (on a cluster), applied here in stream order.

`c` is the Collection; cluster/collection_stream.py follows the stream and hands each batch to `apply`.
"""

from __future__ import annotations

import msgspec

from ..store.records import Delete, Put
from ..store.replay import matrix
from .commit import append, commit, maintain


def apply(c, batch: list[tuple[int, list]]) -> None:
    """Apply writes from the memory stream, in stream order: (sequence, log entries) pairs. A write at or below
    `applied_seq` (made here, or applied before) is skipped. Each entry is logged here with its sequence; a
    memory gets this node's own vector labels."""
    stream = c.stream
    with c.lock.gen_wlock():
        if c.closed:
            return
        for seq, entries in batch:
            if seq < c.rows.applied_seq or (seq == c.rows.applied_seq and seq != stream.reapply):
                continue
            for entry in entries:
                if isinstance(entry, Delete):
                    if entry.id in c.memories:
                        [(start, end)] = append(c, [entry], sync=False, seq=seq)
                        c.log.dead_bytes += c.rows.span_bytes(entry.id) + end - start
                        c.vectors.remove(c.rows.remove(entry.id).labels)
                        c.changes_since_save += 1
                    continue
                memory = entry.memory
                current = c.memories.get(memory.id)
                count = len(memory.labels)
                labels = (list(current.labels) if current is not None and len(current.labels) == count
                          else c.rows.new_labels(count))
                memory = msgspec.structs.replace(memory, labels=labels)
                vecs = matrix(entry.vectors, c.embedder.dim)
                commit(c, [Put(memory=memory, vectors=entry.vectors, detect=entry.detect)], [(memory, vecs)],
                       sync=False, seq=seq)
            if seq >= stream.reapply:
                stream.reapply = 0
            stream.applied_to(seq)
        maintain(c)

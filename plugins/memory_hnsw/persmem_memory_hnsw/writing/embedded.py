"""The background embedder's results written back: each memory logged again with its vectors, put in the index,
and linked to an older memory it restates when its store asked for detection.

`c` is the Collection; embedding/background.py calls `embed_pending` through it.
"""

from __future__ import annotations

import msgspec
import numpy as np

from persmem_core.sdk import UserError

from ..cluster.collection_stream import replicated
from ..permissions import editors_in
from ..store.records import LinkChange, Memory, Put
from .commit import append, commit, maintain
from .storing import superseded_link


def embed_pending(c, items: list[tuple[str, int]]) -> int:
    """Embed the memories `items` names (id, ticket) that still have no vectors, log each again with its
    vectors (and a detected supersession link, when its store asked for one) and put them in the index.
    The background embedder calls this; returns how many were embedded. Items that were deleted or changed
    meanwhile are skipped (a changed text is queued by the write that changed it)."""
    with c.lock.gen_rlock():
        wanted = [(memory_id, c.entry_of(memory_id)) for memory_id, _ in items
                  if memory_id in c.rows.unembedded]
    done = 0
    if wanted:
        vectors = c.embedder.embed_chunks([entry.memory.content for _, entry in wanted])
        # Runs of memories to add as they were stored, each ended by one that asked for detection: that one is
        # compared with the index once the run before it is in (a restatement of a memory of the same batch is
        # found), under the read lock, so stores and searches are not held up by the comparison.
        plain: list[tuple[Memory, np.ndarray]] = []
        for (_, entry), vecs in zip(wanted, vectors, strict=True):
            memory = entry.memory
            if not (entry.detect and not memory.supersedes):
                plain.append((memory, vecs))
                continue
            done += add_embedded(c, plain)
            plain = []
            with c.lock.gen_rlock():
                found = superseded_link(c, memory.project, memory.author, editors_in(c.config, c.name),
                                              memory.created, memory.content, vecs)
            if found is not None:
                done += add_embedded(c, [(memory, vecs)], link=found[0])
            else:
                plain.append((memory, vecs))
        done += add_embedded(c, plain)
    c.tickets.done(max(ticket for _, ticket in items))
    return done

@replicated
def add_embedded(c, embedded: list[tuple[Memory, np.ndarray]], link: LinkChange | None = None) -> int:
    """Log memories again with their vectors and put the vectors in the index; returns how many. Each item
    is (the memory as it was embedded, its vectors). The memory's latest entry
    is read again under the write lock: one deleted, changed or not waiting any more meanwhile is skipped
    (a changed text is queued by the write that changed it), and a lifecycle change made meanwhile is kept.
    Unchanged but for its vectors, a memory keeps its row (only where its entry is moves); with `link` (a
    detected restatement, checked again here) it is put anew. Not fsynced: the vectors are derived, and a
    crash before the next fsync only has them embedded again."""
    if not embedded:
        return 0
    with c.lock.gen_wlock():
        if c.closed:
            raise UserError(f"collection {c.name!r} was closed")
        puts, vecs_of, relabelled = [], [], 0
        for embedded_from, vecs in embedded:
            if embedded_from.id not in c.rows.unembedded:
                continue
            memory = c.entry_of(embedded_from.id).memory  # a lifecycle change may have logged it again since
            if memory.content_hash != embedded_from.content_hash:
                continue
            blob = vecs.astype(np.float32).tobytes()
            if len(vecs) != len(memory.labels):  # labels reserved by another version's chunking: new ones
                memory = msgspec.structs.replace(memory, labels=c.rows.new_labels(len(vecs)))
                commit(c, [Put(memory=memory, vectors=blob)], [(memory, vecs)], sync=False)
                relabelled += 1
                continue
            target = link.target if link is not None else None
            if target is not None and target in c.memories and target not in c.rows.successor_of:
                memory = msgspec.structs.replace(memory, supersedes=[target],
                                                 link_history=[*memory.link_history, link])
                commit(c, [Put(memory=memory, vectors=blob)], [(memory, vecs)], sync=False)
                return 1
            puts.append(Put(memory=memory, vectors=blob))
            vecs_of.append(vecs)
        if not puts:
            return relabelled
        spans = append(c, puts, sync=False)
        for put, span in zip(puts, spans, strict=True):
            c.log.dead_bytes += c.rows.span_bytes(put.memory.id)
            c.rows.mark_embedded(put.memory.id, span)
        c.vectors.add([label for put in puts for label in put.memory.labels], np.vstack(vecs_of))
        c.changes_since_save += len(puts)
        maintain(c)
        return len(puts) + relabelled

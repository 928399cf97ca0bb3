"""Opening a collection from its files: replay the log into the rows, check which model made the stored
vectors, and bring the vector index in line with the log (load the saved index and replay the log's tail onto
it, or rebuild it from the logged vectors). For `persmem memory reindex`, re-embed every memory instead.

The log is the truth; the index file and the rows are derived from it, so whatever they lack or hold too much
is settled here, in favour of the log. A sealed file that does not open (SealingError: its key is not on hand, or
it was changed) stops the open before anything is written; it is never cut off or rebuilt over.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import numpy as np

from persmem_core.sdk import UserError, atomic_write_bytes

from . import checkpoint, checkpoint_load, checkpoint_save
from .log import RecordLog, read_frames
from .records import Memory, Put
from .rows import Rows
from .vectors import VectorIndex

log = logging.getLogger("persmem.memory")

INDEX_NAME = "vectors.hnsw"  # the saved hnswlib index (with its .meta.json sidecar)
MODEL_RECORD = "model.json"  # which embedding model made the collection's vectors


class Opened(msgspec.Struct):
    """What `open_rows` did: whether the rows came from the checkpoint, and where the time went (seconds)."""

    from_checkpoint: bool
    tail_entries: int
    timings: dict[str, float]


def open_rows(folder: Path, record_log: RecordLog, rows: Rows, vectors: VectorIndex, dim: int, model_id: str, *,
              keep_vectors: bool) -> Opened:
    """Make the log's live memories the (empty) rows and open the log for appends: from the checkpoint and the
    log after it when one fits this log and model (store/checkpoint.py), else by replaying the whole log. Without
    `keep_vectors` (a reindex) always the whole log, as `replay_log`."""
    clock = time.perf_counter()
    loaded = None
    if keep_vectors:
        loaded = checkpoint_load.load(folder, rows, vectors, record_log.path, model_id=model_id,
                                      sealer=record_log.sealer)
    if loaded is None:
        replay_log(record_log, rows, vectors, dim, keep_vectors=keep_vectors)
        return Opened(from_checkpoint=False, tail_entries=0, timings={"full_replay": time.perf_counter() - clock})
    timings = dict(loaded.timings)
    clock = time.perf_counter()
    record_log.dead_bytes = loaded.dead_bytes
    entries = record_log.open_and_replay(loaded.log_offset, loaded.log_crc32)
    tail = _apply_entries(entries, record_log, rows, vectors, dim, keep_vectors=True)
    timings["tail"] = time.perf_counter() - clock
    log.info("collection in %s: rows from the checkpoint, %d log entries replayed after it", folder, tail)
    return Opened(from_checkpoint=True, tail_entries=tail, timings=timings)


def save_checkpoint(folder: Path, record_log: RecordLog, rows: Rows, vectors: VectorIndex, model_id: str) -> None:
    """Save the rows and the int8 vectors as of the log's end (store/checkpoint.py); the caller holds the write lock.
    OSError like an index save (the checkpoint is optional: the next open replays the whole log without it)."""
    checkpoint_save.save(folder, rows, vectors, record_log.path, record_log.size, record_log.dead_bytes, model_id,
                         record_log.sealer, log_crc=record_log.crc)


def drop_checkpoint(folder: Path, rows: Rows | None = None) -> None:
    """Remove the checkpoint, durably: call it before the log file is replaced (a compaction, a reindex), with
    the collection's rows: none is saved of them again until the collection is reopened (checkpoint.drop)."""
    checkpoint.drop(folder, rows)


def replay_log(record_log: RecordLog, rows: Rows, vectors: VectorIndex, dim: int, *, keep_vectors: bool) -> None:
    """Open the log and make its live memories the rows. With `keep_vectors`, their logged vectors also fill the
    index's int8 copy (exact scoring); without (a reindex), they are about to be replaced."""
    _apply_entries(record_log.open_and_replay(), record_log, rows, vectors, dim, keep_vectors=keep_vectors)


def _apply_entries(entries, record_log: RecordLog, rows: Rows, vectors: VectorIndex, dim: int, *,
                   keep_vectors: bool) -> int:
    """Apply logged entries, in order, to the rows and the int8 copy; returns how many."""
    pending_labels, pending_vectors = [], []
    count = 0
    for offset, end, entry in entries:
        count += 1
        if entry.seq > rows.applied_seq:  # a replicated collection's place in the memory stream
            rows.applied_seq = entry.seq
        if isinstance(entry, Put):
            if entry.memory.id in rows.heads:
                record_log.dead_bytes += rows.span_bytes(entry.memory.id)
            labels = entry.memory.labels
            rows.put(entry.memory, (offset, end), embedded=not labels or bool(entry.vectors))
            if labels:
                rows.next_label = max(rows.next_label, max(entry.memory.labels) + 1)
                if keep_vectors and len(entry.vectors) == 4 * dim * len(entry.memory.labels):
                    pending_labels.extend(entry.memory.labels)
                    pending_vectors.append(entry.vectors)
                    if len(pending_labels) >= 4096:  # the int8 copy, a block at a time
                        vectors.remember(pending_labels, matrix(b"".join(pending_vectors), dim))
                        pending_labels, pending_vectors = [], []
        else:
            if entry.id in rows.heads:
                record_log.dead_bytes += rows.span_bytes(entry.id) + (end - offset)
                rows.remove(entry.id)
    if pending_labels:
        vectors.remember(pending_labels, matrix(b"".join(pending_vectors), dim))
    return count  # the BM25 delta left is searched as it is, and merged when due (not here: ~2 s at 1M memories)


def check_model(folder: Path, name: str, embedder, has_memories: bool) -> None:
    """Refuse to open vectors of another model than the configured one (search results would mean nothing);
    record the model for a collection that has no vectors yet."""
    marker = folder / MODEL_RECORD
    if marker.exists():
        recorded = msgspec.json.decode(marker.read_bytes())
        if recorded.get("model_id") != embedder.model_id and has_memories:
            raise UserError(
                f"collection {name!r} holds vectors of model {recorded.get('model_id')!r}, but the configured "
                f"embedder is {embedder.model_id!r}. Mixing models gives meaningless search results: switch "
                "back, or run `persmem memory reindex` to re-embed everything with the new model."
            )
    if not marker.exists() or not has_memories:
        record_model(folder, embedder)


def record_model(folder: Path, embedder) -> None:
    atomic_write_bytes(folder / MODEL_RECORD, msgspec.json.encode({"model_id": embedder.model_id, "dim": embedder.dim}))


def load_index(name: str, folder: Path, record_log: RecordLog, rows: Rows, vectors: VectorIndex, model_id: str,
               dim: int) -> bool:
    """Load the saved index and replay onto it the log entries written after it was saved. False when there is
    no saved index that fits the log and the model (then rebuild it)."""
    meta = vectors.load(folder / INDEX_NAME, model_id=model_id, log_size=record_log.size, sealer=record_log.sealer)
    if meta is None:
        return False
    tail = read_frames(_read_from(record_log.path, meta.log_offset), record_log.sealer, record_log.path)
    replayed = 0
    in_graph = vectors.in_graph()
    try:
        for _, _, entry in tail:  # changes after the index was saved, in order
            replayed += 1
            if isinstance(entry, Put):
                current = rows.heads.get(entry.memory.id)
                labels = entry.memory.labels
                if current is None or current.labels != labels:
                    vectors.remove(labels)  # superseded later in the tail
                    continue
                if not entry.vectors:  # not embedded yet (its labels are new: nothing of it is in the graph)
                    continue
                logged = matrix(entry.vectors, dim)
                known = np.array([label in in_graph for label in labels], dtype=bool)
                vectors.replace([lb for lb, k in zip(labels, known, strict=True) if k], logged[known])
                vectors.add([lb for lb, k in zip(labels, known, strict=True) if not k], logged[~known])
                in_graph.update(labels)
            else:
                pass  # deleted memories' labels are removed below
    except RuntimeError as exc:  # hnswlib refused a change: the saved index does not fit the log
        log.warning("collection %s: %s while replaying the log onto the index; rebuilding it", name, exc)
        return False
    live = rows.label_row
    vectors.remove([label for label in vectors.index.get_ids_list() if label >= len(live) or live[label] < 0])
    vectors.live = live_labels(rows)
    log.info("collection %s: index loaded, %d log entries replayed on top", name, replayed)
    return True


def rebuild_index(name: str, rows: Rows, vectors: VectorIndex, logged_vectors: Callable[[str], np.ndarray]) -> None:
    """A new index from every live memory's logged vectors (the caller saves it)."""
    start = time.monotonic()
    n_labels = live_labels(rows)
    vectors.create(capacity=max(1024, int(n_labels * 1.25)))
    batch_labels, batch_vecs = [], []
    for memory in rows.heads.values():
        if memory.id in rows.unembedded:  # no vectors yet: the background embedder adds them
            continue
        batch_labels.extend(memory.labels)
        batch_vecs.append(logged_vectors(memory.id))
        if len(batch_labels) >= 2048:
            vectors.add(batch_labels, np.vstack(batch_vecs))
            batch_labels, batch_vecs = [], []
    if batch_labels:
        vectors.add(batch_labels, np.vstack(batch_vecs))
    if rows.heads:
        log.info("collection %s: rebuilt the vector index (%d chunks) in %.1fs", name, n_labels,
                 time.monotonic() - start)


def reembed_all(record_log: RecordLog, rows: Rows, vectors: VectorIndex, embedder,
                load: Callable[[str], Memory]) -> None:
    """Embed every live memory again with `embedder`, into a new index and a rewritten log (new labels from 0);
    the caller records the model and saves the index."""
    memories = [load(memory_id) for memory_id in rows.heads]
    vectors.create(capacity=max(1024, len(memories) * 2))
    entries, rows.next_label = [], 0
    for start in range(0, len(memories), 256):
        part = memories[start : start + 256]
        for memory, vecs in zip(part, embedder.embed_chunks([m.content for m in part]), strict=True):
            labels = rows.new_labels(len(vecs))
            memory = msgspec.structs.replace(memory, labels=labels)
            rows.put(memory, (0, 0))
            vectors.add(labels, vecs)
            entries.append(Put(memory=memory, vectors=vecs.tobytes()))
    checkpoint.drop(record_log.path.parent, rows)  # its offsets are of the log about to be replaced
    for entry, span in zip(entries, record_log.rewrite(entries), strict=True):
        rows.set_span(entry.memory.id, span)


def live_labels(rows: Rows) -> int:
    """How many vector labels the live memories hold in the graph (those not embedded yet hold none)."""
    pending = rows.unembedded
    return sum(head.n_labels for head in rows.heads.values() if not pending or head.id not in pending)


def matrix(blob: bytes, dim: int) -> np.ndarray:
    """Logged float32 vectors as a (chunks, dim) array (a view on `blob`, not a copy)."""
    return np.frombuffer(blob, dtype=np.float32).reshape(-1, dim)


def _read_from(path: Path, offset: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read()

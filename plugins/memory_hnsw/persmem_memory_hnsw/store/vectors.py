"""The vector index: hnswlib, derived from the record log.

- Labels are chunk labels recorded in each Memory, so the index can always
  be rebuilt from the log.
- Deleted labels' slots are reused (`allow_replace_deleted`), and an update
  that keeps a memory's number of chunks keeps its labels and replaces their
  vectors in place, so updates and deletes do not grow the index (or the
  int8 copy) without bound.
- Saved as a temp file + fsync + rename, with a sidecar holding its sha256,
  the model id and the log offset it covers. An index file is loaded only if
  its checksum matches (a crafted or torn hnswlib file is never parsed);
  otherwise it is rebuilt from the log.
- Sealed when encryption is on (a sealed stream, purpose b"memory.index"):
  hnswlib saves into an in-memory file (sealing.scratch_file), which is
  sealed into the temp file; a load opens it into another in-memory file.
  The plaintext index never touches the disk. The sidecar's sha256 is over
  the file as stored; the sidecar itself holds no text and stays plain.
- hnswlib is not safe for concurrent add + query: the collection holds a
  read-write lock around every call here.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import msgspec
import numpy as np

from persmem_core.sdk import (
    HEADER_BYTES,
    HashingReader,
    KeyNotOnHand,
    Sealer,
    SealingError,
    atomic_write_bytes,
    create_private,
    fsync_dir,
    is_sealed,
    open_private,
    scratch_file,
    sha256_file,
)

from .heap import grown

log = logging.getLogger("persmem.memory.vectors")

PURPOSE = b"memory.index"  # what the index file is sealed as


class IndexMeta(msgspec.Struct, kw_only=True):
    sha256: str
    model_id: str
    dim: int
    log_offset: int
    count: int


class VectorIndex:
    def __init__(self, dim: int, *, m: int, ef_construction: int, ef_search: int):
        self.dim, self.m, self.ef_construction, self.ef_search = dim, m, ef_construction, ef_search
        self.index = None
        self.live = 0
        # An int8 copy of every vector by label (scaled per row), for exact filtered search: a numpy gather plus
        # one matrix product scores 10,000 chunks in ~3 ms, where hnswlib's get_items costs ~30 us per label and
        # a filtered graph walk calls back into Python for every candidate. Filled from the log on open and on
        # every add (a quarter of float32's memory; the log keeps the exact float32 vectors).
        self._q = np.zeros((0, dim), dtype=np.int8)
        self._scale = np.zeros(0, dtype=np.float32)

    def remember(self, labels: list[int] | np.ndarray, vectors: np.ndarray) -> None:
        """Keep the int8 copy of `vectors` for exact search (without adding them to the graph)."""
        rows = np.asarray(labels, dtype=np.int64)
        if rows.size == 0:
            return
        top = int(rows.max()) + 1
        self._q, self._scale = grown(self._q, top), grown(self._scale, top)
        peak = np.maximum(np.abs(vectors).max(axis=1), 1e-12)
        self._q[rows] = np.rint(vectors * (127.0 / peak)[:, None]).astype(np.int8)
        self._scale[rows] = peak / 127.0

    def similarities(self, labels: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Exact (to int8 rounding) inner products of `query` with the vectors of `labels`."""
        out = np.empty(len(labels), dtype=np.float32)
        for start in range(0, len(labels), 1024):  # blocks that stay in cache: ~1.5x faster than all at once
            part = labels[start : start + 1024]  # np.take gathers rows ~1.5x faster than fancy indexing
            out[start : start + 1024] = np.take(self._q, part, axis=0).astype(np.float32) @ query
        return out * np.take(self._scale, labels)

    def vectors_of(self, labels: np.ndarray) -> np.ndarray:
        """The int8 copy of `labels`' vectors as float32 (unit length to int8 rounding): what a search compares
        its own results with (lifecycle.restated)."""
        return np.take(self._q, labels, axis=0).astype(np.float32) * np.take(self._scale, labels)[:, None]

    def _new(self, capacity: int):
        import hnswlib

        index = hnswlib.Index(space="ip", dim=self.dim)
        index.init_index(max_elements=max(capacity, 1024), M=self.m, ef_construction=self.ef_construction,
                         allow_replace_deleted=True)
        index.set_ef(self.ef_search)
        index.set_num_threads(1)
        return index

    def create(self, capacity: int = 1024) -> None:
        self.index = self._new(capacity)
        self.live = 0

    def add(self, labels: list[int], vectors: np.ndarray) -> None:
        """Add vectors under labels that are not in the graph (a deleted label's slot is reused)."""
        if not labels:
            return
        need = self.index.get_current_count() + len(labels)
        if need > self.index.get_max_elements():
            self.index.resize_index(max(need, self.index.get_max_elements() * 2))
        at = np.asarray(labels, dtype=np.uint64)
        self.index.add_items(vectors, at, replace_deleted=True)
        self.live += len(labels)
        self.remember(labels, vectors)

    def replace(self, labels: list[int], vectors: np.ndarray) -> None:
        """New vectors for labels that are live in the graph, in their own slots. (add_items with
        replace_deleted=True would put a live label into a deleted slot and leave the old slot answering
        searches under the same label with the old vector.)"""
        if not labels:
            return
        self.index.add_items(vectors, np.asarray(labels, dtype=np.uint64), replace_deleted=False)
        self.remember(labels, vectors)

    def in_graph(self) -> set[int]:
        """Every label the graph holds, live or marked deleted."""
        return set(self.index.get_ids_list())

    def remove(self, labels: list[int]) -> None:
        for label in labels:
            try:
                self.index.mark_deleted(label)
                self.live -= 1
            except RuntimeError:
                pass  # already deleted or never added (replay after a crash)

    def search(self, query: np.ndarray, k: int, allowed=None) -> tuple[np.ndarray, np.ndarray]:
        """(labels, similarities) of the k nearest live chunks, optionally only labels `allowed(label)`."""
        k = min(k, self.live)
        if k <= 0:
            return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.float32)
        self.index.set_ef(max(self.ef_search, k))
        while True:
            try:
                labels, distances = self.index.knn_query(query, k=k, filter=allowed)
                return labels[0], 1.0 - distances[0]
            except RuntimeError as exc:  # fewer than k reachable (under the filter, or past chunks marked deleted)
                if "contiguous" not in str(exc):
                    raise
                if k == 1:
                    return np.empty(0, dtype=np.uint64), np.empty(0, dtype=np.float32)
                k = max(1, k // 4)

    # -- persistence ---------------------------------------------------
    def save(self, path: Path, *, model_id: str, log_offset: int, sealer: Sealer | None = None) -> None:
        """Save the index (sealed when `sealer` is enabled) and its sidecar, each atomically."""
        tmp = path.with_name(path.name + ".tmp")
        try:
            if sealer is not None and sealer.enabled:
                with scratch_file(path.name) as (scratch_path, scratch):
                    self.index.save_index(scratch_path)
                    scratch.seek(0)
                    with open_private(tmp) as out:
                        sealer.seal_stream(scratch, out, PURPOSE)
            else:
                create_private(tmp)  # hnswlib writes into it by name, keeping its mode: 0600
                self.index.save_index(str(tmp))
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)  # the saved index stays as it was; a half copy would only take space
            raise
        replace_index(tmp, path, IndexMeta(sha256=sha256_file(tmp), model_id=model_id, dim=self.dim,
                                           log_offset=log_offset, count=self.live))

    def load(self, path: Path, *, model_id: str, log_size: int, sealer: Sealer | None = None) -> IndexMeta | None:
        """Load the saved index if its sidecar vouches for it; None means rebuild (also when it is sealed and does
        not authenticate: it is derived from the log). SealingError (naming the file) when it is sealed under a
        key that is not on hand: never rebuilt over (that would write under the wrong key)."""
        import hnswlib

        try:
            meta = msgspec.json.decode(meta_path(path).read_bytes(), type=IndexMeta)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return None
        if meta.model_id != model_id or meta.dim != self.dim or meta.log_offset > log_size:
            log.warning("%s: index is for another model or a longer log; rebuilding", path)
            return None
        index = hnswlib.Index(space="ip", dim=self.dim)
        try:
            with open(path, "rb") as stored:
                if not is_sealed(stored.read(HEADER_BYTES)):
                    if sha256_file(path) != meta.sha256:
                        return _mismatch(path)
                    index.load_index(str(path), allow_replace_deleted=True)
                    return self._loaded(index, meta)
                stored.seek(0)
                hashed = HashingReader(stored)  # checked against the sidecar in the pass that opens it
                with scratch_file(path.name) as (scratch_path, scratch):
                    try:
                        (sealer or Sealer.plain()).open_stream(hashed, scratch, PURPOSE)
                    except KeyNotOnHand as exc:
                        if hashed.hexdigest_to_end() != meta.sha256:  # not the file the sidecar vouches for
                            return _mismatch(path)
                        raise SealingError(f"{path}: {exc}") from None
                    except SealingError as exc:  # damaged under a key on hand: derived data, made again
                        log.warning("%s: %s; rebuilding the index from the log", path, exc)
                        return None
                    if hashed.hexdigest_to_end() != meta.sha256:
                        return _mismatch(path)
                    scratch.flush()
                    index.load_index(scratch_path, allow_replace_deleted=True)
        except OSError:
            return None
        except RuntimeError as exc:  # hnswlib writes no error when a save runs out of disk: a cut file lands here
            log.warning("%s: %s; rebuilding the index from the log", path, exc)
            return None
        return self._loaded(index, meta)

    def _loaded(self, index, meta: IndexMeta) -> IndexMeta:
        index.set_ef(self.ef_search)
        index.set_num_threads(1)
        self.index = index
        self.live = meta.count
        return meta


def replace_index(tmp: Path, path: Path, meta: IndexMeta) -> None:
    """Put the fsynced index file `tmp` in place of `path`, then its sidecar. A kill between the two leaves a
    sidecar whose checksum does not match: the next open rebuilds the index from the log."""
    os.replace(tmp, path)
    fsync_dir(path.parent)
    atomic_write_bytes(meta_path(path), msgspec.json.encode(meta))


def reseal_index(path: Path, sealer: Sealer, *, dry_run: bool) -> tuple[bool, bool]:
    """Bring a saved index file to the state new saves have, atomically (the sidecar's checksum follows);
    (held plaintext, was or would be rewritten). The plaintext is only ever in memory."""
    with open(path, "rb") as stored:
        first = stored.read(HEADER_BYTES)
        plain = not is_sealed(first)
        if not sealer.needs_reseal(first):
            return plain, False
        if dry_run:
            return plain, True
        vouched = _vouched_meta(path)  # read before the file changes: does the sidecar vouch for it now?
        tmp = path.with_name(path.name + ".tmp")
        stored.seek(0)
        try:
            with scratch_file(path.name) as (_, scratch):
                try:
                    sealer.open_stream(stored, scratch, PURPOSE)
                except SealingError as exc:
                    raise SealingError(f"{path}: {exc}") from None
                scratch.seek(0)
                with open_private(tmp) as out:
                    sealer.seal_stream(scratch, out, PURPOSE)
                    out.flush()
                    os.fsync(out.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    if vouched is None:  # the sidecar did not vouch for the old file: the next open rebuilds it anyway
        os.replace(tmp, path)
        fsync_dir(path.parent)
    else:
        replace_index(tmp, path, msgspec.structs.replace(vouched, sha256=sha256_file(tmp)))
    return plain, True


def _vouched_meta(path: Path) -> IndexMeta | None:
    """The sidecar of the index file `path` if its checksum matches the file as it is."""
    try:
        meta = msgspec.json.decode(meta_path(path).read_bytes(), type=IndexMeta)
        return meta if sha256_file(path) == meta.sha256 else None
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _mismatch(path: Path) -> None:
    log.warning("%s: checksum mismatch; rebuilding the index from the log", path)
    return None


def meta_path(path: Path) -> Path:
    return path.with_name(path.name + ".meta.json")

"""One collection: the record log (truth), the rows and the vector index (derived), behind one lock.

Write path: embed outside the lock -> take the write lock -> dedup checks (dedup.py) ->
append to the log and fsync -> apply to the rows and the index -> release.
A write that returned is in the log; everything else can be rebuilt from it (replay.py, on open).
Read path: embed the query outside the lock -> read lock -> rank the rows (ranking.py) ->
read the winners' entries back from the log.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np
from readerwriterlock import rwlock

from persmem_core import UserError

from .config import MemoryConfig
from .contexts import MAX_CONTEXT_CHARS
from .dedup import exact_duplicate, near_duplicate
from .heap import release_freed_memory
from .log import LOG_NAME, RecordLog, decode_frame, write_failed
from .permissions import check_change
from .query import Filters
from .ranking import rank
from .records import ID_RE, Delete, Head, Memory, Put, Version, content_hash, new_id, summarize
from .replay import (INDEX_NAME, check_model, load_index, matrix, rebuild_index, record_model, reembed_all,
                     replay_log)
from .rows import Rows
from .vectors import VectorIndex

log = logging.getLogger("persmem.memory")


class WriteFailed(UserError):
    """The disk refused a write: nothing was stored. Unlike a refused memory, calling again later may succeed
    (a background indexer keeps the work for then instead of skipping it)."""


@dataclass
class NewMemory:
    content: str
    project: str
    type: str
    tags: list[str]
    memory_id: str | None = None
    author: str | None = None  # imports keep the original author and time
    created: float | None = None
    context: str = ""  # text around it (contexts.neighbour_contexts), indexed for keyword search only


@dataclass
class Hit:
    memory: Memory
    score: float
    dense: float | None
    lexical: float | None


class Collection:
    def __init__(self, name: str, folder: Path, embedder, config: MemoryConfig):
        self.name, self.folder, self.embedder, self.config = name, Path(folder), embedder, config
        self.lock = rwlock.RWLockWrite()
        self.log = RecordLog(self.folder / LOG_NAME)
        self.rows = Rows()
        self.vectors: VectorIndex | None = None
        self.changes_since_save = 0
        self._upkeep_after = 0.0  # monotonic time before which _maintain does nothing (after a failure)

    @property
    def memories(self) -> dict[str, Head]:
        """The live memories' heads by id (hold the lock while you iterate)."""
        return self.rows.heads

    @property
    def next_label(self) -> int:
        return self.rows.next_label

    # -- opening and closing ----------------------------------------------
    def open(self, *, reindex: bool = False) -> Collection:
        """Replay the log and load (or rebuild) the index. With `reindex`, re-embed every memory
        with the current embedder first (after a model change)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.embedder.load()
        cfg = self.config
        self.vectors = VectorIndex(self.embedder.dim, m=cfg.hnsw_m, ef_construction=cfg.hnsw_ef_construction,
                                   ef_search=cfg.hnsw_ef_search)
        replay_log(self.log, self.rows, self.vectors, self.embedder.dim, keep_vectors=not reindex)
        release_freed_memory()
        if reindex:
            reembed_all(self.log, self.rows, self.vectors, self.embedder, self._load)
            record_model(self.folder, self.embedder)
            self.save_index()
            return self
        check_model(self.folder, self.name, self.embedder, bool(self.memories))
        if not load_index(self.name, self.folder, self.log, self.rows, self.vectors, self.embedder.model_id,
                          self.embedder.dim):
            rebuild_index(self.name, self.rows, self.vectors, self._logged_vectors)
            if self.memories:
                self.save_index()
        return self

    def close(self) -> None:
        with self.lock.gen_wlock():
            try:
                if self.changes_since_save and self.vectors is not None:
                    self.save_index()
            except OSError as exc:  # the index is derived: the next open rebuilds it from the log
                log.warning("collection %s: could not save the index on close (%s)", self.name, exc)
            self.log.close()

    def save_index(self) -> None:
        self.vectors.save(self.folder / INDEX_NAME, model_id=self.embedder.model_id, log_offset=self.log.size)
        self.changes_since_save = 0

    def compact(self) -> None:
        """Rewrite the log with only the live memories' latest entries, copied as they are."""
        ids = sorted(self.memories, key=lambda memory_id: self.rows.span(memory_id)[0])
        spans = self.log.rewrite(self.log.read(*self.rows.span(memory_id)) for memory_id in ids)
        for memory_id, span in zip(ids, spans, strict=True):
            self.rows.set_span(memory_id, span)
        self.save_index()
        log.info("collection %s: compacted the log to %d bytes", self.name, self.log.size)

    # -- the log entries behind the heads (hold the lock: a compaction swaps the log file) --
    def _entry(self, memory_id: str) -> Put:
        """A live memory's latest log entry."""
        return decode_frame(self.log.read(*self.rows.span(memory_id)))

    def _load(self, memory_id: str) -> Memory:
        return self._entry(memory_id).memory

    def _logged_vectors(self, memory_id: str) -> np.ndarray:
        """The exact float32 vectors of a live memory, from its latest log entry."""
        return matrix(self._entry(memory_id).vectors, self.embedder.dim)

    # -- reading ------------------------------------------------------------
    def get(self, memory_id: str) -> Memory:
        """The whole memory (text and history included)."""
        with self.lock.gen_rlock():
            if memory_id not in self.memories:
                raise UserError(f"no memory {memory_id!r} in collection {self.name!r}; memory_search finds ids.")
            return self._load(memory_id)

    def get_many(self, memory_ids: list[str]) -> list[Memory]:
        """The whole memories of those ids that are still live, in the given order."""
        with self.lock.gen_rlock():
            return [self._load(memory_id) for memory_id in memory_ids if memory_id in self.memories]

    def search(self, query: str, *, top_k: int, filters: Filters, mode: str = "hybrid",
               recency_weight: float = 0.0, candidates: int = 60) -> list[Hit]:
        qvec = self.embedder.embed_query(query) if mode in ("hybrid", "dense") else None
        with self.lock.gen_rlock():
            ranked = rank(self.rows, self.vectors, self.config, query, qvec, top_k=top_k, filters=filters, mode=mode,
                          recency_weight=recency_weight, candidates=candidates)
            return [Hit(memory=self._load(self.rows.at_row[r.row].id), score=r.score, dense=r.dense,
                        lexical=r.lexical) for r in ranked]

    def matching(self, filters: Filters) -> list[Head]:
        """Heads of the live memories that pass `filters` (the masks searches use), in no particular order;
        `get_many` reads the ones you show."""
        with self.lock.gen_rlock():
            mask = self.rows.mask(filters, len(self.rows))
            return [self.rows.at_row[row] for row in np.flatnonzero(mask).tolist() if self.rows.at_row[row] is not None]

    def recent(self, *, types: set[str], project: str | None = None, limit: int = 3,
               predicate=None) -> list[Memory]:
        """The `limit` most recently updated memories of `types` (and `project`) whose head passes `predicate`."""
        with self.lock.gen_rlock():
            found = [m for m in self.memories.values()
                     if m.type in types and (project is None or m.project == project) and (predicate is None or predicate(m))]
            found = sorted(found, key=lambda m: m.updated, reverse=True)[:limit]
            return [self._load(m.id) for m in found]

    def stats(self, project: str | None = None) -> dict:
        with self.lock.gen_rlock():
            counts = summarize(m for m in self.memories.values() if project is None or m.project == project)
            return {"collection": self.name, **counts, "log_bytes": self.log.size,
                    "embedding_model": self.embedder.model_id}

    def names_in_use(self) -> dict[str, set[str]]:
        """The projects, types, authors and tags the live memories use (for "did you mean" hints)."""
        with self.lock.gen_rlock():
            used = {"project": set(), "memory_type": set(), "author": set(), "tag": set()}
            for m in self.memories.values():
                used["project"].add(m.project)
                used["memory_type"].add(m.type)
                used["author"].add(m.author)
                used["tag"].update(m.tags)
            return used

    # -- writing ------------------------------------------------------------
    def store(self, items: list[NewMemory], *, author: str, dedup: bool = True) -> list[dict]:
        for item in items:
            self._validate_new(item)
        embedded = self.embedder.embed_chunks([item.content for item in items])
        results, puts, pending = [], [], []
        with self.lock.gen_wlock():
            now = time.time()
            batch_hashes: dict[tuple[str, str, str], str] = {}
            for item, vecs in zip(items, embedded, strict=True):
                digest = content_hash(item.content)
                owner = item.author or author
                if item.memory_id and item.memory_id in self.memories:
                    raise UserError(f"memory id {item.memory_id!r} already exists; use memory_update to change it.")
                if dedup:
                    same = (exact_duplicate(self.rows, self._load, item.project, owner, digest)
                            or batch_hashes.get((item.project, owner, digest)))
                    if same:
                        results.append({"status": "duplicate", "id": same, "match": "exact"})
                        continue
                    near = near_duplicate(self.rows, self.vectors, self._load, self.config.dedup_threshold,
                                          item.project, owner, item.content, vecs)
                    if near is not None:
                        results.append({"status": "duplicate", "id": near[0], "match": "near",
                                        "similarity": round(near[1], 4)})
                        continue
                memory_id = item.memory_id or new_id()
                labels = self.rows.new_labels(len(vecs))
                created = item.created if item.created is not None else now
                memory = Memory(id=memory_id, content=item.content, project=item.project, type=item.type,
                                tags=item.tags, author=item.author or author, editor=item.author or author,
                                collection=self.name, created=created, updated=created, content_hash=digest,
                                context=item.context, labels=labels)
                batch_hashes[(item.project, owner, digest)] = memory_id
                puts.append(Put(memory=memory, vectors=vecs.astype(np.float32).tobytes()))
                pending.append((memory, vecs))
                results.append({"status": "stored", "id": memory_id, "chunks": len(labels)})
            self._commit(puts, pending)
        if len(items) >= 64:  # a bulk store leaves its batch garbage behind
            release_freed_memory()
        return results

    def update(self, memory_id: str, *, editor: str, editors: dict[str, list[str]], content: str | None = None,
               tags: list[str] | None = None, type: str | None = None, project: str | None = None) -> Memory:
        """A new version made by `editor`, who must be the author or granted by `editors` (permissions.py)."""
        current = self.get(memory_id)
        vecs = self.embedder.embed_chunks([content])[0] if content is not None and content != current.content else None
        if content is not None:
            self._check_content(content)
        with self.lock.gen_wlock():
            if memory_id not in self.memories:
                raise UserError(f"no memory {memory_id!r} in collection {self.name!r}.")
            check_change(editors, editor, self.memories[memory_id], "update", new_type=type)
            current = self._load(memory_id)
            if vecs is None:
                vecs = self._logged_vectors(memory_id)
                labels = current.labels
            elif len(vecs) == len(current.labels):  # as many chunks as before: same labels, vectors replaced
                labels = current.labels
            else:
                labels = self.rows.new_labels(len(vecs))
            snapshot = Version(version=current.version, content=current.content, tags=current.tags,
                               type=current.type, project=current.project, author=current.author,
                               updated=current.updated, editor=current.editor)
            new_content = current.content if content is None else content
            memory = msgspec.structs.replace(
                current, content=new_content, tags=current.tags if tags is None else tags,
                type=type or current.type, project=project or current.project, updated=time.time(),
                version=current.version + 1, editor=editor, content_hash=content_hash(new_content), labels=labels,
                history=[*current.history, snapshot],
            )
            self._commit([Put(memory=memory, vectors=vecs.astype(np.float32).tobytes())], [(memory, vecs)])
            return memory

    def delete(self, memory_id: str, *, by: str, editors: dict[str, list[str]]) -> Memory:
        """Delete for `by`, who must be the author or granted by `editors` (permissions.py)."""
        with self.lock.gen_wlock():
            if memory_id not in self.memories:
                raise UserError(f"no memory {memory_id!r} in collection {self.name!r}.")
            check_change(editors, by, self.memories[memory_id], "delete")
            memory = self._load(memory_id)
            self._append([Delete(id=memory_id, at=time.time(), by=by)])
            self.log.dead_bytes += self.rows.span_bytes(memory_id)
            gone = self.rows.remove(memory_id)
            self.vectors.remove(gone.labels)
            self.changes_since_save += 1
            self._maintain()
            return memory

    def _commit(self, puts: list[Put], pending: list[tuple[Memory, np.ndarray]]) -> None:
        """Log durably, then apply to the rows and the index. Caller holds the write lock."""
        if not puts:
            return
        spans = self._append(puts)  # raises: nothing applied, nothing acknowledged
        for (memory, vecs), span in zip(pending, spans, strict=True):
            if memory.id in self.memories:
                self.log.dead_bytes += self.rows.span_bytes(memory.id)
            old, head = self.rows.put(memory, span)
            if old is None or old.labels != memory.labels:
                if old is not None:
                    self.vectors.remove(old.labels)
                self.vectors.add(memory.labels, vecs)
            elif old.dedup_key != head.dedup_key:  # new text (or project) under the same labels
                self.vectors.replace(memory.labels, vecs)
        self.changes_since_save += len(puts)
        self._maintain()

    def _append(self, entries: list) -> list[tuple[int, int]]:
        """Log durably. A failed write (disk full, I/O error) leaves the log as it was and is reported as
        a UserError saying nothing was stored."""
        try:
            return self.log.append(entries)
        except OSError as exc:
            log.error("collection %s: could not append to %s: %s", self.name, self.log.path, exc)
            raise WriteFailed(write_failed(self.folder, exc, "nothing was stored or changed")) from None

    def _maintain(self) -> None:
        """Compact the log when most of it is superseded; save the index now and then. Write lock held.
        Both are optional upkeep after an acknowledged write: if one fails (say the disk is full) the write
        still stands, and the upkeep is tried again a minute later."""
        if time.monotonic() < self._upkeep_after:
            return
        try:
            if self.log.dead_bytes > max(1 << 20, self.log.size // 2):
                self.compact()
            elif self.changes_since_save >= self.config.save_index_every:
                self.save_index()
        except OSError as exc:
            self._upkeep_after = time.monotonic() + 60.0
            log.warning("collection %s: compaction or index save failed (%s); the log is intact, retrying later",
                        self.name, exc)

    # -- validation -----------------------------------------------------------
    def _check_content(self, content: str) -> None:
        if not content.strip():
            raise UserError("content is empty; store some text.")
        if len(content) > self.config.max_content_chars:
            raise UserError(
                f"content is {len(content)} characters; the limit is {self.config.max_content_chars} "
                "([memory] max_content_chars). Split it into several memories (memory_bulk_store)."
            )

    def _validate_new(self, item: NewMemory) -> None:
        self._check_content(item.content)
        if len(item.context) > MAX_CONTEXT_CHARS:
            raise UserError(f"context is {len(item.context)} characters; at most {MAX_CONTEXT_CHARS}.")
        if item.memory_id is not None and not ID_RE.match(item.memory_id):
            raise UserError(f"invalid memory id {item.memory_id!r}: 1-128 letters, digits, '_', ':', '.', '-'.")

"""One collection: the record log (truth), the vector index and BM25 (derived), and hybrid search.

Write path: embed outside the lock -> take the write lock -> dedup checks ->
append to the log and fsync -> apply to the in-memory views -> release.
A write that returned is in the log; everything else can be rebuilt from it.
Read path: embed the query outside the lock -> read lock -> filters ->
dense (hnswlib, or exact over the filtered chunks when the filter is
selective) + BM25 -> score fusion -> optional recency weighting.
"""

from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np
from readerwriterlock import rwlock

from persmem_core import UserError

from .config import MemoryConfig
from .heap import grown, release_freed_memory
from .lexical import BM25Index
from .log import LOG_NAME, RecordLog, decode_frame, read_frames, write_failed
from .permissions import check_change
from .records import ID_RE, Delete, Head, Memory, Put, Version, content_hash, dedup_key, head_of, new_id
from .vectors import VectorIndex

log = logging.getLogger("persmem.memory")

WORDS = re.compile(r"\w+")
CONTEXT_CHARS_PER_SIDE = 2000  # most characters of neighbours kept on each side (memory_bulk_store context_chars)
MAX_CONTEXT_CHARS = 2 * CONTEXT_CHARS_PER_SIDE + 1  # before + "\n" + after
INDEX_NAME = "vectors.hnsw"


@dataclass
class NewMemory:
    content: str
    project: str
    type: str
    tags: list[str]
    memory_id: str | None = None
    author: str | None = None  # imports keep the original author and time
    created: float | None = None
    context: str = ""  # text around it (see neighbour_contexts), indexed for keyword search only


@dataclass
class Filters:
    project: str | None = None
    type: str | None = None
    author: str | None = None
    tags: list[str] = field(default_factory=list)
    since: float | None = None
    until: float | None = None

    def active(self) -> bool:
        return any((self.project, self.type, self.author, self.tags, self.since is not None, self.until is not None))


@dataclass
class Hit:
    memory: Memory
    score: float
    dense: float | None
    lexical: float | None


class _Codes:
    """Small integer codes for repeated strings (projects, types, authors), for numpy filters."""

    def __init__(self):
        self.code: dict[str, int] = {}

    def get(self, value: str) -> int:
        if value not in self.code:
            self.code[value] = len(self.code)
        return self.code[value]


class Collection:
    def __init__(self, name: str, folder: Path, embedder, config: MemoryConfig):
        self.name, self.folder, self.embedder, self.config = name, Path(folder), embedder, config
        self.lock = rwlock.RWLockWrite()
        self.log = RecordLog(self.folder / LOG_NAME)
        self.memories: dict[str, Head] = {}  # live memories' heads; texts and histories stay in the log
        self.by_hash: dict[int, str] = {}  # dedup_key(project, author, content hash) -> id
        self.row_of: dict[str, int] = {}
        self.at_row: list[Head | None] = []
        self._strings: dict[str, str] = {}  # one copy of each project, type, author and tag
        self._label_row = np.full(0, -1, dtype=np.int32)  # vector label -> row (-1: none)
        self.next_label = 0
        self.projects, self.types, self.authors = _Codes(), _Codes(), _Codes()
        self._project = np.zeros(0, dtype=np.int32)
        self._type = np.zeros(0, dtype=np.int32)
        self._author = np.zeros(0, dtype=np.int32)
        self._created = np.zeros(0, dtype=np.float64)
        self._alive = np.zeros(0, dtype=bool)
        self._first = np.zeros(0, dtype=np.int64)  # a row's labels are first .. first + count - 1
        self._count = np.zeros(0, dtype=np.int32)
        self._start = np.zeros(0, dtype=np.int64)  # where a row's log entry is: start .. end
        self._end = np.zeros(0, dtype=np.int64)
        self.tag_rows: dict[str, set[int]] = {}
        self.lexical = BM25Index()
        self.vectors: VectorIndex | None = None
        self.changes_since_save = 0
        self._upkeep_after = 0.0  # monotonic time before which _maintain does nothing (after a failure)

    # -- opening --------------------------------------------------------
    def open(self, *, reindex: bool = False) -> Collection:
        """Replay the log and load (or rebuild) the index. With `reindex`, re-embed every memory
        with the current embedder first (after a model change)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.embedder.load()
        cfg = self.config
        self.vectors = VectorIndex(self.embedder.dim, m=cfg.hnsw_m, ef_construction=cfg.hnsw_ef_construction,
                                   ef_search=cfg.hnsw_ef_search)
        pending_labels, pending_vectors = [], []
        for offset, end, entry in self.log.open_and_replay():
            if isinstance(entry, Put):
                if entry.memory.id in self.memories:
                    self.log.dead_bytes += self._span_bytes(entry.memory.id)
                self._apply_put(entry.memory, index=False, span=(offset, end))
                if entry.memory.labels:
                    self.next_label = max(self.next_label, max(entry.memory.labels) + 1)
                    if not reindex and len(entry.vectors) == 4 * self.embedder.dim * len(entry.memory.labels):
                        pending_labels.extend(entry.memory.labels)
                        pending_vectors.append(entry.vectors)
                        if len(pending_labels) >= 4096:  # the int8 copy, a block at a time
                            self.vectors.remember(pending_labels, _matrix(b"".join(pending_vectors), self.embedder.dim))
                            pending_labels, pending_vectors = [], []
            else:
                if entry.id in self.memories:
                    self.log.dead_bytes += self._span_bytes(entry.id) + (end - offset)
                    self._apply_delete(entry.id, index=False)
        if pending_labels:
            self.vectors.remember(pending_labels, _matrix(b"".join(pending_vectors), self.embedder.dim))
        self.lexical.merge()
        release_freed_memory()
        if reindex:
            self._reembed_all()
            return self
        self._check_model()
        self._open_vectors()
        return self

    def _reembed_all(self) -> None:
        memories = [self._load(memory_id) for memory_id in self.memories]
        self.vectors.create(capacity=max(1024, len(memories) * 2))
        entries, self.next_label = [], 0
        for start in range(0, len(memories), 256):
            part = memories[start : start + 256]
            for memory, vecs in zip(part, self.embedder.embed_chunks([m.content for m in part]), strict=True):
                labels = list(range(self.next_label, self.next_label + len(vecs)))
                self.next_label += len(vecs)
                memory = msgspec.structs.replace(memory, labels=labels)
                self._apply_put(memory, index=False, span=(0, 0))
                self.vectors.add(labels, vecs)
                entries.append(Put(memory=memory, vectors=vecs.tobytes()))
        for entry, span in zip(entries, self.log.rewrite(entries), strict=True):
            self._set_span(entry.memory.id, span)
        from persmem_core.fileio import atomic_write_bytes

        atomic_write_bytes(self.folder / "model.json",
                           msgspec.json.encode({"model_id": self.embedder.model_id, "dim": self.embedder.dim}))
        self.save_index()

    def _check_model(self) -> None:
        marker = self.folder / "model.json"
        if marker.exists():
            recorded = msgspec.json.decode(marker.read_bytes())
            if recorded.get("model_id") != self.embedder.model_id and self.memories:
                raise UserError(
                    f"collection {self.name!r} holds vectors of model {recorded.get('model_id')!r}, but the configured "
                    f"embedder is {self.embedder.model_id!r}. Mixing models gives meaningless search results: switch "
                    "back, or run `persmem memory reindex` to re-embed everything with the new model."
                )
        if not marker.exists() or not self.memories:
            from persmem_core.fileio import atomic_write_bytes

            atomic_write_bytes(marker, msgspec.json.encode({"model_id": self.embedder.model_id, "dim": self.embedder.dim}))

    def _open_vectors(self) -> None:
        index_path = self.folder / INDEX_NAME
        n_labels = sum(m.n_labels for m in self.memories.values())
        meta = self.vectors.load(index_path, model_id=self.embedder.model_id, log_size=self.log.size)
        if meta is not None:
            tail = read_frames(_read_from(self.log.path, meta.log_offset))
            replayed = 0
            in_graph = self.vectors.in_graph()
            try:
                for _, _, entry in tail:  # changes after the index was saved, in order
                    replayed += 1
                    if isinstance(entry, Put):
                        current = self.memories.get(entry.memory.id)
                        labels = entry.memory.labels
                        if current is None or current.labels != labels:
                            self.vectors.remove(labels)  # superseded later in the tail
                            continue
                        vectors = _matrix(entry.vectors, self.embedder.dim)
                        known = np.array([label in in_graph for label in labels], dtype=bool)
                        self.vectors.replace([lb for lb, k in zip(labels, known, strict=True) if k], vectors[known])
                        self.vectors.add([lb for lb, k in zip(labels, known, strict=True) if not k], vectors[~known])
                        in_graph.update(labels)
                    else:
                        pass  # deleted memories' labels are removed below
            except RuntimeError as exc:  # hnswlib refused a change: the saved index does not fit the log
                log.warning("collection %s: %s while replaying the log onto the index; rebuilding it", self.name, exc)
                self._rebuild_vectors(n_labels)
                return
            live = self._label_row
            self.vectors.remove([label for label in self.vectors.index.get_ids_list()
                                 if label >= len(live) or live[label] < 0])
            self.vectors.live = n_labels
            log.info("collection %s: index loaded, %d log entries replayed on top", self.name, replayed)
            return
        self._rebuild_vectors(n_labels)

    def _rebuild_vectors(self, n_labels: int) -> None:
        start = time.monotonic()
        self.vectors.create(capacity=max(1024, int(n_labels * 1.25)))
        batch_labels, batch_vecs = [], []
        for memory in self.memories.values():
            batch_labels.extend(memory.labels)
            batch_vecs.append(self._logged_vectors(memory.id))
            if len(batch_labels) >= 2048:
                self.vectors.add(batch_labels, np.vstack(batch_vecs))
                batch_labels, batch_vecs = [], []
        if batch_labels:
            self.vectors.add(batch_labels, np.vstack(batch_vecs))
        if self.memories:
            log.info("collection %s: rebuilt the vector index (%d chunks) in %.1fs", self.name, n_labels,
                     time.monotonic() - start)
            self.save_index()

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

    # -- in-memory views -------------------------------------------------
    def _grow(self, row: int) -> None:
        for name in ("_project", "_type", "_author", "_created", "_alive", "_first", "_count", "_start", "_end"):
            setattr(self, name, grown(getattr(self, name), row + 1))

    def _apply_put(self, memory: Memory, *, index: bool, span: tuple[int, int],
                   vectors: np.ndarray | None = None) -> None:
        old = self.memories.get(memory.id)
        if old is not None:
            self._apply_delete(memory.id, index=index and old.labels != memory.labels)
        head = head_of(memory, self._strings)
        row = len(self.at_row)
        self.at_row.append(head)
        self._grow(row)
        self.memories[memory.id] = head
        self.row_of[memory.id] = row
        self.by_hash[head.dedup_key] = memory.id
        self._start[row], self._end[row] = span
        if memory.labels:
            first, count = head.first_label, head.n_labels
            self._first[row], self._count[row] = first, count
            self._label_row = grown(self._label_row, first + count, fill=-1)
            self._label_row[first : first + count] = row
        self._project[row] = self.projects.get(memory.project)
        self._type[row] = self.types.get(memory.type)
        self._author[row] = self.authors.get(memory.author)
        self._created[row] = memory.created
        self._alive[row] = True
        for tag in head.tags:
            self.tag_rows.setdefault(tag, set()).add(row)
        self.lexical.add(row, _lexical_text(memory), context=memory.context)
        if index and vectors is not None:
            if old is None or old.labels != memory.labels:
                self.vectors.add(memory.labels, vectors)
            elif old.dedup_key != head.dedup_key:  # new text (or project) under the same labels
                self.vectors.replace(memory.labels, vectors)

    def _apply_delete(self, memory_id: str, *, index: bool) -> None:
        memory = self.memories.pop(memory_id)
        row = self.row_of.pop(memory_id)
        self.at_row[row] = None
        self._alive[row] = False
        if self.by_hash.get(memory.dedup_key) == memory_id:
            del self.by_hash[memory.dedup_key]
        for tag in memory.tags:
            self.tag_rows.get(tag, set()).discard(row)
        self._label_row[memory.first_label : memory.first_label + memory.n_labels] = -1
        self.lexical.remove(row)
        if index:
            self.vectors.remove(memory.labels)

    # -- writing ---------------------------------------------------------
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
                    same = (self._exact_duplicate(item.project, owner, digest)
                            or batch_hashes.get((item.project, owner, digest)))
                    if same:
                        results.append({"status": "duplicate", "id": same, "match": "exact"})
                        continue
                    near = self._near_duplicate(item.project, owner, item.content, vecs)
                    if near is not None:
                        results.append({"status": "duplicate", "id": near[0], "match": "near",
                                        "similarity": round(near[1], 4)})
                        continue
                memory_id = item.memory_id or new_id()
                labels = list(range(self.next_label, self.next_label + len(vecs)))
                self.next_label += len(vecs)
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

    def _commit(self, puts: list[Put], pending: list[tuple[Memory, np.ndarray]]) -> None:
        """Log durably, then apply. Caller holds the write lock."""
        if not puts:
            return
        spans = self._append(puts)  # raises: nothing applied, nothing acknowledged
        for (memory, vecs), span in zip(pending, spans, strict=True):
            if memory.id in self.memories:
                self.log.dead_bytes += self._span_bytes(memory.id)
            self._apply_put(memory, index=True, span=span, vectors=vecs)
        self.changes_since_save += len(puts)
        self._maintain()

    def _exact_duplicate(self, project: str, author: str, digest: str) -> str | None:
        memory_id = self.by_hash.get(dedup_key(project, author, digest))
        if memory_id is None:
            return None
        memory = self._load(memory_id)  # confirm: the key is a 64-bit digest of (project, author, hash)
        same = memory.project == project and memory.author == author and memory.content_hash == digest
        return memory_id if same else None

    def _near_duplicate(self, project: str, author: str, content: str, vecs: np.ndarray) -> tuple[str, float] | None:
        """A near duplicate, by the same author, is close in meaning (cosine >= dedup_threshold) *and* in words
        (Jaccard >= 0.9 on word sets): "step 2" and "step 3" embed almost alike but are different facts."""
        if len(vecs) != 1 or self.vectors.live == 0 or self.config.dedup_threshold >= 1.0:
            return None
        code = self.projects.code.get(project)
        if code is None:
            return None
        labels, sims = self.vectors.search(vecs[0], 3)
        for label, sim in zip(labels, sims, strict=True):
            row = int(self._label_row[label])
            head = self.at_row[row] if row >= 0 else None
            if (head is not None and head.project == project and head.author == author and head.n_labels == 1
                    and sim >= self.config.dedup_threshold):
                if _jaccard(content, self._load(head.id).content) >= 0.9:
                    return head.id, float(sim)
        return None

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
                labels = list(range(self.next_label, self.next_label + len(vecs)))
                self.next_label += len(vecs)
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
            self.log.dead_bytes += self._span_bytes(memory_id)
            self._apply_delete(memory_id, index=True)
            self.changes_since_save += 1
            self._maintain()
            return memory

    def _append(self, entries: list) -> list[tuple[int, int]]:
        """Log durably. A failed write (disk full, I/O error) leaves the log as it was and is reported as
        a UserError saying nothing was stored."""
        try:
            return self.log.append(entries)
        except OSError as exc:
            log.error("collection %s: could not append to %s: %s", self.name, self.log.path, exc)
            raise UserError(write_failed(self.folder, exc, "nothing was stored or changed")) from None

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

    def compact(self) -> None:
        """Rewrite the log with only the live memories' latest entries, copied as they are."""
        ids = sorted(self.memories, key=lambda memory_id: self._span(memory_id)[0])
        spans = self.log.rewrite(self.log.read(*self._span(memory_id)) for memory_id in ids)
        for memory_id, span in zip(ids, spans, strict=True):
            self._set_span(memory_id, span)
        self.save_index()
        log.info("collection %s: compacted the log to %d bytes", self.name, self.log.size)

    # -- the log entries behind the heads -------------------------------
    def _span(self, memory_id: str) -> tuple[int, int]:
        row = self.row_of[memory_id]
        return int(self._start[row]), int(self._end[row])

    def _set_span(self, memory_id: str, span: tuple[int, int]) -> None:
        row = self.row_of[memory_id]
        self._start[row], self._end[row] = span

    def _span_bytes(self, memory_id: str) -> int:
        start, end = self._span(memory_id)
        return end - start

    def _entry(self, memory_id: str) -> Put:
        """A live memory's latest log entry. Hold the lock (a compaction swaps the log file)."""
        return decode_frame(self.log.read(*self._span(memory_id)))

    def _load(self, memory_id: str) -> Memory:
        return self._entry(memory_id).memory

    def _logged_vectors(self, memory_id: str) -> np.ndarray:
        """The exact float32 vectors of a live memory, from its latest log entry."""
        return _matrix(self._entry(memory_id).vectors, self.embedder.dim)

    # -- validation ------------------------------------------------------

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

    # -- reading ---------------------------------------------------------
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

    def _filter_mask(self, filters: Filters, n_rows: int) -> np.ndarray:
        mask = self._alive[:n_rows].copy()
        for value, codes, column in ((filters.project, self.projects, self._project),
                                     (filters.type, self.types, self._type),
                                     (filters.author, self.authors, self._author)):
            if value:
                code = codes.code.get(value)
                if code is None:
                    return np.zeros(n_rows, dtype=bool)
                mask &= column[:n_rows] == code
        if filters.since is not None:
            mask &= self._created[:n_rows] >= filters.since
        if filters.until is not None:
            mask &= self._created[:n_rows] <= filters.until
        if filters.tags:
            tag_mask = np.zeros(n_rows, dtype=bool)
            for tag in filters.tags:
                rows = self.tag_rows.get(tag)
                if rows:
                    tag_mask[np.fromiter(rows, dtype=np.int64)] = True
            mask &= tag_mask
        return mask

    def search(self, query: str, *, top_k: int, filters: Filters, mode: str = "hybrid",
               recency_weight: float = 0.0, candidates: int = 60) -> list[Hit]:
        qvec = self.embedder.embed_query(query) if mode in ("hybrid", "dense") else None
        with self.lock.gen_rlock():
            n_rows = len(self.at_row)
            if n_rows == 0:
                return []
            mask = self._filter_mask(filters, n_rows) if filters.active() else None
            pool = max(candidates, top_k * 4)
            dense = self._dense(qvec, mask, pool) if qvec is not None else {}
            lexical = self._lexical(query, mask, n_rows, pool) if mode in ("hybrid", "lexical") else {}
            scores = fuse(dense, lexical, self.config.dense_weight if mode == "hybrid" else (1.0 if mode == "dense" else 0.0))
            if recency_weight > 0 and scores:
                now = time.time()
                for row in scores:
                    age_days = max(0.0, (now - self._created[row]) / 86400.0)
                    scores[row] *= (1.0 - recency_weight) + recency_weight * math.exp(-age_days / 30.0)
            best = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)[:top_k]
            return [Hit(memory=self._load(self.at_row[row].id), score=float(score), dense=dense.get(row),
                        lexical=lexical.get(row)) for row, score in best if self.at_row[row] is not None]

    def _dense(self, qvec: np.ndarray, mask: np.ndarray | None, pool: int) -> dict[int, float]:
        """Best chunk similarity per row for the `pool` best rows: exact over the filtered rows when they hold
        few chunks, else the hnswlib graph (with the filter applied during the walk)."""
        if mask is not None:
            rows = np.flatnonzero(mask)
            counts = self._count[rows]
            total = int(counts.sum())
            if total <= self.config.exact_search_below:
                return self._exact(qvec, rows, counts, total, pool)
            label_row = self._label_row[: self.next_label]
            ok = np.zeros(len(label_row), dtype=np.uint8)
            live = label_row >= 0
            ok[live] = mask[label_row[live]]
            ok = ok.tobytes()
            labels, sims = self.vectors.search(qvec, pool * 2, allowed=lambda label: ok[label] == 1)
        else:
            labels, sims = self.vectors.search(qvec, pool * 2)
        best: dict[int, float] = {}
        label_row = self._label_row
        for label, sim in zip(labels.tolist(), sims.tolist(), strict=True):
            row = int(label_row[label]) if label < len(label_row) else -1
            if row >= 0 and sim > best.get(row, -2.0):
                best[row] = sim
        return dict(sorted(best.items(), key=lambda kv: kv[1], reverse=True)[:pool])

    def _exact(self, qvec: np.ndarray, rows: np.ndarray, counts: np.ndarray, total: int, pool: int) -> dict[int, float]:
        if total == 0:
            return {}
        if total == len(rows) and bool((counts == 1).all()):  # one chunk each (the usual case)
            sims = self.vectors.similarities(self._first[rows], qvec)
        else:  # a row's labels are consecutive: expand them, then take each row's best chunk
            starts = np.cumsum(counts) - counts
            labels = np.repeat(self._first[rows] - starts, counts) + np.arange(total)
            keep = counts > 0
            rows, starts = rows[keep], starts[keep]
            sims = np.maximum.reduceat(self.vectors.similarities(labels, qvec), starts)
        n = min(pool, len(rows))
        top = np.argpartition(-sims, n - 1)[:n]
        return dict(zip(rows[top].tolist(), sims[top].tolist(), strict=True))

    def _lexical(self, query: str, mask: np.ndarray | None, n_rows: int, pool: int) -> dict[int, float]:
        scores = self.lexical.scores(query, n_rows)
        if scores is None:
            return {}
        if mask is not None:
            scores = scores * mask
        n = min(pool, int(np.count_nonzero(scores)))
        if n == 0:
            return {}
        top = np.argpartition(-scores, n - 1)[:n]
        return {int(row): float(scores[row]) for row in top}

    def stats(self, project: str | None = None) -> dict:
        with self.lock.gen_rlock():
            memories = [m for m in self.memories.values() if project is None or m.project == project]
            projects, types, tags, authors = {}, {}, {}, {}
            for m in memories:
                projects[m.project] = projects.get(m.project, 0) + 1
                types[m.type] = types.get(m.type, 0) + 1
                authors[m.author] = authors.get(m.author, 0) + 1
                for tag in m.tags:
                    tags[tag] = tags.get(tag, 0) + 1
            sizes = [m.chars for m in memories]
            return {
                "collection": self.name,
                "count": len(memories),
                "projects": projects,
                "types": types,
                "authors": authors,
                "tags": dict(sorted(tags.items(), key=lambda kv: -kv[1])[:50]),
                "unique_tags": len(tags),
                "average_chars": round(sum(sizes) / len(sizes), 1) if sizes else 0,
                "oldest": min((m.created for m in memories), default=None),
                "newest": max((m.created for m in memories), default=None),
                "chunks": sum(m.n_labels for m in memories),
                "log_bytes": self.log.size,
                "embedding_model": self.embedder.model_id,
            }

    def matching(self, filters: Filters) -> list[Head]:
        """Heads of the live memories that pass `filters` (the masks searches use), in no particular order;
        `get_many` reads the ones you show."""
        with self.lock.gen_rlock():
            mask = self._filter_mask(filters, len(self.at_row))
            return [self.at_row[row] for row in np.flatnonzero(mask).tolist() if self.at_row[row] is not None]

    def recent(self, *, types: set[str], project: str | None = None, limit: int = 3,
               predicate=None) -> list[Memory]:
        """The `limit` most recently updated memories of `types` (and `project`) whose head passes `predicate`."""
        with self.lock.gen_rlock():
            found = [m for m in self.memories.values()
                     if m.type in types and (project is None or m.project == project) and (predicate is None or predicate(m))]
            found = sorted(found, key=lambda m: m.updated, reverse=True)[:limit]
            return [self._load(m.id) for m in found]


def fuse(dense: dict[int, float], lexical: dict[int, float], dense_weight: float) -> dict[int, float]:
    """Min-max score fusion: each candidate list scaled to [0, 1] (best 1, worst 0), then a weighted sum."""
    out: dict[int, float] = {}
    for scores, weight in ((dense, dense_weight), (lexical, 1.0 - dense_weight)):
        if not scores or weight <= 0:
            continue
        top, low = max(scores.values()), min(scores.values())
        span = top - low
        for row, score in scores.items():
            out[row] = out.get(row, 0.0) + weight * ((score - low) / span if span > 1e-9 else 1.0)
    return out


def neighbour_contexts(texts: list[str], chars: int) -> list[str]:
    """For each of `texts` (consecutive chunks of one conversation or document), up to `chars` characters of
    the chunks before it and up to `chars` after it, cut at word boundaries: what BM25 indexes with it."""
    if chars <= 0:
        return [""] * len(texts)
    out = []
    for i in range(len(texts)):
        before, j = "", i - 1
        while j >= 0 and len(before) < chars:
            before, j = f"{texts[j][-chars:]}\n{before}", j - 1
        after, j = "", i + 1
        while j < len(texts) and len(after) < chars:
            after, j = f"{after}\n{texts[j][:chars]}", j + 1
        if len(before) > chars:  # drop the word cut in half, if the kept part has a space
            cut = before[-chars:]
            before = cut.split(maxsplit=1)[-1] if " " in cut else cut
        if len(after) > chars:
            cut = after[:chars]
            after = cut.rsplit(maxsplit=1)[0] if " " in cut else cut
        out.append(f"{before.strip()}\n{after.strip()}".strip())
    return out


def _jaccard(a: str, b: str) -> float:
    words_a, words_b = set(WORDS.findall(a.casefold())), set(WORDS.findall(b.casefold()))
    return len(words_a & words_b) / max(1, len(words_a | words_b))


def _lexical_text(memory: Memory) -> str:
    return f"{memory.content} {' '.join(memory.tags)}"


def _matrix(blob: bytes, dim: int) -> np.ndarray:
    return np.frombuffer(blob, dtype=np.float32).reshape(-1, dim)


def _read_from(path: Path, offset: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read()

"""One collection: the record log (truth), the rows and the vector index (derived), behind one lock.

Write path of a store: take the write lock -> dedup checks (lifecycle/dedup.py) -> reserve the vector labels -> write to
the log -> apply to the rows (found by keyword from here on) -> release -> wait for an fsync that covers the
entry (one fsync serves every writer that came meanwhile: store/log.py) -> acknowledge -> the background embedder
(embedding/background.py) embeds it in a batch and logs it again with its vectors (`embed_pending`), which puts them in the
index. Other writes (update, delete, links, feedback) append and fsync under the lock.
A write that returned is in the log; everything else can be rebuilt from it (store/replay.py, on open).
Read path: embed the query outside the lock -> read lock -> rank the rows (search/ranking.py) ->
read the winners' entries back from the log.

Lifecycle writes (a supersedes link made or undone, feedback, a consolidated memory) are each one Put of the
memory that holds the link, so a kill -9 never leaves half a link, and none of them deletes anything. Retrieval
counts are statistics, not records: kept in memory and saved with the index (usage.msgpack).

At rest, with encryption on (`sealer`, persmem_core.sdk.Sealer): every log frame, the index file and the
retrieval counts are sealed (store/log.py, store/vectors.py); only the model record (a model id) stays plain.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import msgspec
import numpy as np
from readerwriterlock import rwlock

from persmem_core.sdk import Sealer, SealingError, UserError, atomic_write_bytes

from .config import MemoryConfig
from .store.contexts import MAX_CONTEXT_CHARS, MAX_QUESTION_CHARS
from .lifecycle.dedup import exact_duplicate, near_duplicate, word_twins
from .store.heap import release_freed_memory
from .store.log import LOG_NAME, RecordLog, WriteFailed, decode_frame, write_failed
from .search.weighing import CONSOLIDATED_TYPE, LifecycleView, expired, review_due, tier
from .lifecycle.supersession import find_superseded
from .permissions import (BOOTSTRAP_TYPES, check_change, check_visible, editors_in, is_private, may_edit,
                          visible_to)
from .store.query import Filters
from .search.ranking import Hit, rank
from .store.records import (ID_RE, Delete, Feedback, Head, LinkChange, Memory, Put, content_hash, new_id, summarize,
                      trim_feedback, version_of, votes)
from .cluster.replication import Behind, ReplicationFailed
from .store.replay import (INDEX_NAME, check_model, drop_checkpoint, load_index, matrix, open_rows, rebuild_index,
                     record_model, reembed_all, save_checkpoint)
from .store.rows import Rows
from .store.vectors import VectorIndex

log = logging.getLogger("persmem.memory")

USAGE_NAME = "usage.msgpack"  # retrieval counts: id -> (ranked count, last retrieved at, count), saved with the index
USAGE_PURPOSE = b"memory.usage"  # what the retrieval counts are sealed as
MAX_NOTE_CHARS = 500  # a memory_validate note


MAX_WRITE_TRIES = 20  # a write another node's writes keep overtaking (replication.Behind) is made again this often


def replicated(method):
    """A write of a replicated collection is made again after applying what another node wrote first (the
    stream refused it: replication.Behind), so it is decided against the state every node has. Alone: as is."""
    @functools.wraps(method)
    def write(self, *args, **kwargs):
        for _ in range(MAX_WRITE_TRIES):
            try:
                return method(self, *args, **kwargs)
            except Behind as behind:
                self.wait_applied(behind.last_seq)
        raise UserError(f"collection {self.name!r} is being written on other nodes faster than this write could "
                        "follow; nothing was changed. Try again.")
    return write


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
    reply_to: str = ""  # the question before it (contexts.questions_before), indexed for keyword search only
    supersedes: list[str] = field(default_factory=list)  # older memories it replaces (checked: see store)
    consolidates: list[str] = field(default_factory=list)  # a consolidated memory's members (write_consolidated)
    valid_until: float = 0.0  # expires after this timestamp; 0: never
    review_after: float = 0.0  # due for review after this timestamp; 0: never
    detect_supersession: bool = False  # look for an older memory it restates (memory_store of one memory)
    editor: str | None = None  # who made it, if not its author (the consolidation job)


class Collection:
    def __init__(self, name: str, folder: Path, embedder, config: MemoryConfig, sealer: Sealer | None = None,
                 embedding=None, replication=None):
        """`sealer`: the home's (host.sealer); None writes plaintext and refuses sealed files (tests, tools
        without a home). `embedding`: the service's BackgroundEmbedder; None embeds every store before it is
        acknowledged (a collection of its own, in a tool or a test). `replication`: on a cluster, the memory
        stream (cluster/replication.py) every write is published to and the collection follows; None: one box."""
        self.name, self.folder, self.embedder, self.config = name, Path(folder), embedder, config
        self.sealer = sealer or Sealer.plain()
        self.embedding = embedding
        self.closed = False
        # Stores queued for the background embedder are numbered; a search waits for those before it.
        self._tickets = 0  # the last number given
        self._embedded_ticket = 0  # every store numbered up to here is embedded (or gone)
        self._embedded = threading.Condition()
        self.lock = rwlock.RWLockWrite()
        self.log = RecordLog(self.folder / LOG_NAME, self.sealer)
        self.rows = Rows()
        self.vectors: VectorIndex | None = None
        self.changes_since_save = 0
        # Retrievals: id -> (by searches of other agents than its author: what ranking weighs, last retrieved at,
        # by all searches: what memory_get shows). An author's own searches never raise its memory's rank.
        self.usage: dict[str, tuple[int, float, int]] = {}
        self._usage_lock = threading.Lock()  # searches count retrievals under the read lock, side by side
        self._usage_changed = False
        self._upkeep_after = 0.0  # monotonic time before which _maintain does nothing (after a failure)
        self.replication = replication
        self.follower = None  # on a cluster: the stream follower (replication.Follower), from `follow`
        self._applied = threading.Condition()  # notified when Rows.applied_seq moves
        self._snapshot_seq = 0  # the sequence of the last snapshot this node published
        self._since_snapshot = 0  # log entries from the stream (made here or applied) since then
        self._snapshotting = threading.Lock()  # held while a snapshot uploads: one at a time
        self._reapply = 0  # the sequence `follow` applies once more (the last one logged here)

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
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.embedder.load()
        cfg = self.config
        self.vectors = VectorIndex(self.embedder.dim, m=cfg.hnsw_m, ef_construction=cfg.hnsw_ef_construction,
                                   ef_search=cfg.hnsw_ef_search)
        # From the checkpoint and the log after it, or the whole log (replay.open_rows; kept for tests and benchmarks).
        self.opened = opened = open_rows(self.folder, self.log, self.rows, self.vectors, self.embedder.dim,
                                         self.embedder.model_id, keep_vectors=not reindex)
        release_freed_memory()
        self.usage = self._load_usage()
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
        elif not opened.from_checkpoint and self.memories:  # the next open reads it instead of the whole log
            try:
                save_checkpoint(self.folder, self.log, self.rows, self.vectors, self.embedder.model_id)
            except OSError as exc:  # optional: without it the next open replays the whole log, as this one did
                log.warning("collection %s: could not save the checkpoint (%s)", self.name, exc)
        if self.rows.unembedded:  # logged, not embedded before the last stop (a crash, or a server stopped)
            log.info("collection %s: %d memories still to embed", self.name, len(self.rows.unembedded))
            pending = sorted(self.rows.unembedded, key=lambda memory_id: self.rows.row_of[memory_id])
            if self.embedding is None:
                self.embed_pending([(memory_id, 0) for memory_id in pending])
            else:
                self._queue_embedding(pending)
        return self

    def close(self) -> None:
        if self.follower is not None:
            self.follower.stop()
        with self.lock.gen_wlock():
            self.closed = True
            try:
                if self.changes_since_save and self.vectors is not None:
                    self.save_index()
                elif self._usage_changed:
                    self._save_usage()
            except OSError as exc:  # the index is derived: the next open rebuilds it from the log
                log.warning("collection %s: could not save the index on close (%s)", self.name, exc)
            self.log.close()

    def save_index(self) -> None:
        self.vectors.save(self.folder / INDEX_NAME, model_id=self.embedder.model_id, log_offset=self.log.size,
                          sealer=self.sealer)
        save_checkpoint(self.folder, self.log, self.rows, self.vectors, self.embedder.model_id)
        self.changes_since_save = 0
        self._save_usage()
        if (self.replication is not None and not self._snapshotting.locked()
                and self._since_snapshot >= max(self.config.snapshot_every, len(self.memories))):
            self._publish_snapshot()

    # -- on a cluster (cluster/replication.py) ---------------------------------------------------
    def follow(self) -> None:
        """Follow the memory stream from the last write applied here, and return once everything the stream held
        when this was called is applied (a node that was down catches up before it answers)."""
        target = self.replication.last_seq(self.name)
        if self.rows.applied_seq > target:
            raise UserError(f"collection {self.name!r} on this node has writes up to stream sequence "
                            f"{self.rows.applied_seq}, but the cluster's memory stream ends at {target}: it is another "
                            "(or a reset) cluster. Move this node's collection folder aside to start it from the "
                            "cluster, or point [cluster] servers at the cluster it came from.")
        # From the last write applied here, again: a crash may have logged only some of its entries (each carries
        # the write's sequence), and a write's entries are full states, so applying it twice changes nothing.
        self._reapply = self.rows.applied_seq
        self.follower = self.replication.follow(self.name, max(0, self.rows.applied_seq - 1), self.apply_replicated)
        self.wait_applied(target, timeout=None, reapplied=True)

    def wait_applied(self, seq: int, timeout: float | None = 30.0, reapplied: bool = False) -> None:
        """Return once the stream's writes up to `seq` are applied here (with `reapplied`, also the one `follow`
        applies again). UserError after `timeout` seconds, or at once when this node stopped following the
        collection (its follower failed: the log says why)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._applied:
            while not ((self.rows.applied_seq >= seq and not (reapplied and self._reapply)) or self.closed):
                if self.follower is not None and self.follower.failed is not None:
                    raise ReplicationFailed(f"collection {self.name!r} stopped following the cluster on this node "
                                            "(the server log says why); nothing was changed. Restart this node.")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._applied.wait(1.0 if left is None else min(1.0, left))
            if (self.rows.applied_seq < seq or (reapplied and self._reapply)) and not self.closed:
                raise ReplicationFailed(f"collection {self.name!r} on this node is {seq - self.rows.applied_seq} writes "
                                        f"behind the cluster and did not catch up within {timeout:g} s; nothing was "
                                        "changed. Try again (`persmem cluster status` shows the cluster).")

    def apply_replicated(self, batch: list[tuple[int, list]]) -> None:
        """Apply writes from the memory stream, in stream order: (sequence, log entries) pairs. A write at or below
        `applied_seq` (made here, or applied before) is skipped. Each entry is logged here with its sequence; a
        memory gets this node's own vector labels."""
        with self.lock.gen_wlock():
            if self.closed:
                return
            for seq, entries in batch:
                if seq < self.rows.applied_seq or (seq == self.rows.applied_seq and seq != self._reapply):
                    continue
                for entry in entries:
                    if isinstance(entry, Delete):
                        if entry.id in self.memories:
                            [(start, end)] = self._append([entry], sync=False, seq=seq)
                            self.log.dead_bytes += self.rows.span_bytes(entry.id) + end - start
                            self.vectors.remove(self.rows.remove(entry.id).labels)
                            self.changes_since_save += 1
                        continue
                    memory = entry.memory
                    current = self.memories.get(memory.id)
                    count = len(memory.labels)
                    labels = (list(current.labels) if current is not None and len(current.labels) == count
                              else self.rows.new_labels(count))
                    memory = msgspec.structs.replace(memory, labels=labels)
                    vecs = matrix(entry.vectors, self.embedder.dim)
                    self._commit([Put(memory=memory, vectors=entry.vectors, detect=entry.detect)], [(memory, vecs)],
                                 sync=False, seq=seq)
                if seq >= self._reapply:
                    self._reapply = 0
                self._applied_to(seq)
            self._maintain()

    def _applied_to(self, seq: int) -> None:
        with self._applied:
            self.rows.applied_seq = max(self.rows.applied_seq, seq)
            self._applied.notify_all()

    def _publish_snapshot(self) -> None:
        """Hand this node's files as they are now (write lock held, just saved) to the object store, for new nodes
        to start from (replication.restore_snapshot); the upload runs in a thread of its own."""
        from .store.checkpoint import checkpoint_path, meta_path as checkpoint_meta
        from .store.replay import MODEL_RECORD
        from .store.vectors import meta_path as index_meta

        paths = {LOG_NAME: (self.folder / LOG_NAME, self.log.size)}
        for path in (self.folder / INDEX_NAME, index_meta(self.folder / INDEX_NAME), checkpoint_path(self.folder),
                     checkpoint_meta(checkpoint_path(self.folder)), self.folder / MODEL_RECORD):
            if path.exists():
                paths[path.name] = (path, path.stat().st_size)
        files = {name: (open(path, "rb"), size) for name, (path, size) in paths.items()}
        previous, self._snapshot_seq = self._snapshot_seq, self.rows.applied_seq
        seq, self._since_snapshot = self._snapshot_seq, 0
        self._snapshotting.acquire()

        def upload():
            try:
                self.replication.publish_snapshot(self.name, files, seq, newer_than=previous)
            except Exception:  # noqa: BLE001 - optional: a new node then replays more of the stream
                log.exception("collection %s: publishing a snapshot failed", self.name)
            finally:
                self._snapshotting.release()

        threading.Thread(target=upload, name=f"memory-snapshot-{self.name}", daemon=True).start()

    # -- retrieval counts (statistics: a crash loses those since the last save) --
    def record_retrievals(self, ids: list[str], *, by: str | None = None) -> None:
        """Count one retrieval of each of `ids` (the results a search by `by` returned). A memory `by` wrote
        is counted, but not toward its rank: an agent searching its own memories again and again must not
        lift them above the others'."""
        now, heads = time.time(), self.rows.heads
        with self._usage_lock:
            for memory_id in ids:
                head = heads.get(memory_id)
                ranked, _, count = self.usage.get(memory_id, (0, 0.0, 0))
                own = by is not None and head is not None and head.author == by
                self.usage[memory_id] = (ranked + (not own), now, count + 1)
            self._usage_changed = self._usage_changed or bool(ids)

    def usage_of(self, memory_id: str) -> tuple[int, float]:
        """(retrievals, last retrieved at); (0, 0.0) for a memory never returned by a search."""
        _, last, count = self.usage.get(memory_id, (0, 0.0, 0))
        return count, last

    def _save_usage(self) -> None:
        with self._usage_lock:
            live = {k: list(v) for k, v in self.usage.items() if k in self.rows.heads}
            self._usage_changed = False
        if live or (self.folder / USAGE_NAME).exists():
            atomic_write_bytes(self.folder / USAGE_NAME, self.sealer.seal(msgspec.msgpack.encode(live), USAGE_PURPOSE))

    def _load_usage(self) -> dict[str, tuple[int, float, int]]:
        path = self.folder / USAGE_NAME
        try:
            stored = path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:  # statistics: start again
            log.warning("collection %s: retrieval counts in %s unreadable (%s); counting from zero", self.name, path, exc)
            return {}
        try:
            opened = self.sealer.open(stored, USAGE_PURPOSE)
        except SealingError as exc:  # not "counting from zero": the next save would write over them
            raise SealingError(f"{path}: {exc}") from None
        try:
            saved = msgspec.msgpack.decode(opened, type=dict[str, list[float]])
            # (count, last) before own searches were told apart: all of them count toward the rank
            saved = {k: (int(v[0]), float(v[1]), int(v[2] if len(v) > 2 else v[0])) for k, v in saved.items()}
        except (msgspec.DecodeError, msgspec.ValidationError, IndexError) as exc:  # statistics: start again
            log.warning("collection %s: retrieval counts in %s unreadable (%s); counting from zero", self.name,
                        path, exc)
            return {}
        return {k: v for k, v in saved.items() if k in self.rows.heads}

    def compact(self) -> None:
        """Rewrite the log with only the live memories' latest entries, copied as they are."""
        ids = sorted(self.memories, key=lambda memory_id: self.rows.span(memory_id)[0])
        drop_checkpoint(self.folder, self.rows)  # before the log is replaced: never a checkpoint of another log
        spans = self.log.rewrite(self.log.read(*self.rows.span(memory_id)) for memory_id in ids)
        for memory_id, span in zip(ids, spans, strict=True):
            self.rows.set_span(memory_id, span)
        self.save_index()
        log.info("collection %s: compacted the log to %d bytes", self.name, self.log.size)

    # -- the log entries behind the heads (hold the lock: a compaction swaps the log file) --
    def _entry(self, memory_id: str) -> Put:
        """A live memory's latest log entry."""
        return decode_frame(self.log.read(*self.rows.span(memory_id)), self.sealer, self.log.path)

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
               recency_weight: float = 0.0, candidates: int | None = None, include_superseded: bool = True,
               include_expired: bool = False) -> list[Hit]:
        """The `top_k` best memories for `query`, weighed by their lifecycle (lifecycle.adjust): superseded ones
        rank lower (or are left out: include_superseded=False), expired ones are left out unless asked for."""
        qvec = self.embedder.embed_query(query) if mode in ("hybrid", "dense") else None
        if qvec is not None:
            self.wait_embedded(self.config.search_waits_ms / 1000.0)
        view = LifecycleView(config=self.config, now=time.time(), include_superseded=include_superseded,
                             include_expired=include_expired, recency_weight=recency_weight,
                             private=is_private(self.config, self.name), usage=self.usage)
        # In a private collection a search for one author (each agent's own, permissions.own_filters) ranks that
        # author's rows alone, by their own keyword statistics: the others' words never move its scores.
        visible = filters.author if view.private else None
        with self.lock.gen_rlock():
            ranked = rank(self.rows, self.vectors, self.config, query, qvec, top_k=top_k, filters=filters, mode=mode,
                          candidates=candidates or self.config.search_candidates, lifecycle=view,
                          visible_author=visible)
            at_row = self.rows.at_row
            return [Hit(memory=self._load(at_row[r.row].id), score=r.score, dense=r.dense, lexical=r.lexical,
                        restated_by=None if r.restated_by is None else at_row[r.restated_by].id) for r in ranked]

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
                    "embedding_model": self.embedder.model_id, "not_embedded_yet": len(self.rows.unembedded)}

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
    @replicated
    def store(self, items: list[NewMemory], *, author: str, dedup: bool = True,
              editors: dict[str, list[str]] | None = None) -> list[dict]:
        """Store `items` for `author` (one log write for all, all or nothing on a refusal), durably: returns once
        an fsync covers them. They are found by keyword at once and by meaning once the background embedder has
        embedded them (`wait_embedded`; without one, each is embedded before this returns). An item's
        `supersedes` must name memories of this collection that its author may change (`editors` grants);
        with `detect_supersession`, an older memory it restates is linked when it is embedded
        (supersession.find_superseded). A result says `"supersedes": [{"id", "how", ...}]` when it names links."""
        for item in items:
            self._validate_new(item)
        editors = editors or {}
        later = self.embedding is not None and hasattr(self.embedder, "chunk_counts")
        texts = [item.content for item in items]
        if later:
            counts, embedded = self.embedder.chunk_counts(texts), [None] * len(items)
        else:
            embedded = self.embedder.embed_chunks(texts)
            counts = [len(vecs) for vecs in embedded]
        results, puts, pending = [], [], []
        with self.lock.gen_wlock():
            first_label = self.rows.next_label
            now = time.time()
            batch_hashes: dict[tuple[str, str, str], str] = {}
            for i, item in enumerate(items):
                digest = content_hash(item.content)
                owner = item.author or author
                if item.memory_id and item.memory_id in self.memories:
                    raise UserError(f"memory id {item.memory_id!r} already exists; use memory_update to change it.")
                explicit = self._check_supersedes(item, owner, editors)
                if dedup:
                    same = (exact_duplicate(self.rows, self._load, item.project, owner, digest)
                            or batch_hashes.get((item.project, owner, digest)))
                    if same:
                        results.append({"status": "duplicate", "id": same, "match": "exact"})
                        continue
                    twins = word_twins(self.rows, self._load, item.project, owner, item.content) \
                        if counts[i] == 1 else []
                    if twins:  # close in words to one of its own: embed it now to compare the meaning
                        if embedded[i] is None:
                            embedded[i] = self.embedder.embed_chunks([item.content])[0]
                        near = near_duplicate(twins, embedded[i], self._vector_of, self.config.dedup_threshold)
                        if near is not None:
                            results.append({"status": "duplicate", "id": near[0], "match": "near",
                                            "similarity": round(near[1], 4)})
                            continue
                vecs = embedded[i]
                memory_id = item.memory_id or new_id()
                created = item.created if item.created is not None else now
                links = [LinkChange(action="linked", target=target, by=owner, at=now, how="explicit")
                         for target in explicit]
                made = [{"id": target, "how": "explicit"} for target in explicit]
                detect = bool(item.detect_supersession and not explicit and self._may_detect(item))
                if detect and vecs is not None:  # embedded already: look now
                    found = self._find_superseded(item.project, owner, editors, created, item.content, vecs)
                    if found is not None:
                        links, made = [found[0]], [found[1]]
                        explicit = [found[0].target]
                    detect = False
                labels = self.rows.new_labels(counts[i])
                memory = Memory(id=memory_id, content=item.content, project=item.project, type=item.type,
                                tags=item.tags, author=owner, editor=item.editor or owner,
                                collection=self.name, created=created, updated=created, content_hash=digest,
                                context=item.context, reply_to=item.reply_to, labels=labels,
                                supersedes=list(explicit), link_history=links,
                                consolidates=list(item.consolidates), valid_until=item.valid_until,
                                review_after=item.review_after)
                batch_hashes[(item.project, owner, digest)] = memory_id
                if vecs is None:
                    puts.append(Put(memory=memory, vectors=b"", detect=detect))
                    pending.append((memory, np.zeros((0, self.embedder.dim), dtype=np.float32)))
                else:
                    puts.append(Put(memory=memory, vectors=vecs.astype(np.float32).tobytes()))
                    pending.append((memory, vecs))
                result = {"status": "stored", "id": memory_id, "chunks": len(labels)}
                if made:
                    result["supersedes"] = made
                results.append(result)
            try:
                end = self._commit(puts, pending, sync=False)
            except (Behind, ReplicationFailed):  # nothing of it was written: its labels are free again
                self.rows.next_label = first_label
                raise
            waiting = [memory.id for memory, vecs in pending if len(vecs) == 0]
            if waiting:
                self._queue_embedding(waiting)
        self._sync(end, [put.memory.id for put in puts])
        if len(items) >= 64:  # a bulk store leaves its batch garbage behind
            release_freed_memory()
        return results

    def _find_superseded(self, project: str, owner: str, editors: dict[str, list[str]], created: float,
                         content: str, vecs: np.ndarray) -> tuple[LinkChange, dict] | None:
        """The link a new memory makes to an older one it restates (find_superseded), and how a store result
        names it; None when there is none. Write lock held."""
        found = find_superseded(self.rows, self.vectors, self.config, project=project, author=owner,
                                editors=editors, created=created, content=content, vecs=vecs,
                                load_content=lambda old_id: self._load(old_id).content)
        if found is None:
            return None
        detail = f"similarity {found.similarity:.2f}; shared terms: {', '.join(found.shared_terms)}"
        change = LinkChange(action="linked", target=found.id, by=owner, at=time.time(), how="detected",
                            detail=detail)
        return change, {"id": found.id, "how": "detected", "similarity": found.similarity,
                        "shared_terms": found.shared_terms}

    def _vector_of(self, memory_id: str) -> np.ndarray:
        """A live memory's vectors: logged, or made now when it is not embedded yet. Lock held."""
        if memory_id in self.rows.unembedded:
            return self.embedder.embed_chunks([self._load(memory_id).content])[0]
        return self._logged_vectors(memory_id)

    # -- the background embedder's side ----------------------------------------
    def _queue_embedding(self, memory_ids: list[str]) -> None:
        """Number `memory_ids` (logged without vectors) and hand them to the background embedder. Write lock
        held (or the collection is opening)."""
        first = self._tickets + 1
        self._tickets += len(memory_ids)
        self.embedding.submit(self, list(zip(memory_ids, range(first, self._tickets + 1))))

    def embed_pending(self, items: list[tuple[str, int]]) -> int:
        """Embed the memories `items` names (id, ticket) that still have no vectors, log each again with its
        vectors (and a detected supersession link, when its store asked for one) and put them in the index.
        The background embedder calls this; returns how many were embedded. Items that were deleted or changed
        meanwhile are skipped (a changed text is queued by the write that changed it)."""
        with self.lock.gen_rlock():
            wanted = [(memory_id, self._entry(memory_id)) for memory_id, _ in items
                      if memory_id in self.rows.unembedded]
        done = 0
        if wanted:
            vectors = self.embedder.embed_chunks([entry.memory.content for _, entry in wanted])
            # Runs of memories to add as they were stored, each ended by one that asked for detection: that one is
            # compared with the index once the run before it is in (a restatement of a memory of the same batch is
            # found), under the read lock, so stores and searches are not held up by the comparison.
            plain: list[tuple[Memory, np.ndarray]] = []
            for (_, entry), vecs in zip(wanted, vectors, strict=True):
                memory = entry.memory
                if not (entry.detect and not memory.supersedes):
                    plain.append((memory, vecs))
                    continue
                done += self._add_embedded(plain)
                plain = []
                with self.lock.gen_rlock():
                    found = self._find_superseded(memory.project, memory.author, editors_in(self.config, self.name),
                                                  memory.created, memory.content, vecs)
                if found is not None:
                    done += self._add_embedded([(memory, vecs)], link=found[0])
                else:
                    plain.append((memory, vecs))
            done += self._add_embedded(plain)
        self._mark_embedded(max(ticket for _, ticket in items))
        return done

    @replicated
    def _add_embedded(self, embedded: list[tuple[Memory, np.ndarray]], link: LinkChange | None = None) -> int:
        """Log memories again with their vectors and put the vectors in the index; returns how many. Each item
        is (the memory as it was embedded, its vectors). The memory's latest entry
        is read again under the write lock: one deleted, changed or not waiting any more meanwhile is skipped
        (a changed text is queued by the write that changed it), and a lifecycle change made meanwhile is kept.
        Unchanged but for its vectors, a memory keeps its row (only where its entry is moves); with `link` (a
        detected restatement, checked again here) it is put anew. Not fsynced: the vectors are derived, and a
        crash before the next fsync only has them embedded again."""
        if not embedded:
            return 0
        with self.lock.gen_wlock():
            if self.closed:
                raise UserError(f"collection {self.name!r} was closed")
            puts, vecs_of, relabelled = [], [], 0
            for embedded_from, vecs in embedded:
                if embedded_from.id not in self.rows.unembedded:
                    continue
                memory = self._entry(embedded_from.id).memory  # a lifecycle change may have logged it again since
                if memory.content_hash != embedded_from.content_hash:
                    continue
                blob = vecs.astype(np.float32).tobytes()
                if len(vecs) != len(memory.labels):  # labels reserved by another version's chunking: new ones
                    memory = msgspec.structs.replace(memory, labels=self.rows.new_labels(len(vecs)))
                    self._commit([Put(memory=memory, vectors=blob)], [(memory, vecs)], sync=False)
                    relabelled += 1
                    continue
                target = link.target if link is not None else None
                if target is not None and target in self.memories and target not in self.rows.successor_of:
                    memory = msgspec.structs.replace(memory, supersedes=[target],
                                                     link_history=[*memory.link_history, link])
                    self._commit([Put(memory=memory, vectors=blob)], [(memory, vecs)], sync=False)
                    return 1
                puts.append(Put(memory=memory, vectors=blob))
                vecs_of.append(vecs)
            if not puts:
                return relabelled
            spans = self._append(puts, sync=False)
            for put, span in zip(puts, spans, strict=True):
                self.log.dead_bytes += self.rows.span_bytes(put.memory.id)
                self.rows.mark_embedded(put.memory.id, span)
            self.vectors.add([label for put in puts for label in put.memory.labels], np.vstack(vecs_of))
            self.changes_since_save += len(puts)
            self._maintain()
            return len(puts) + relabelled

    def _mark_embedded(self, ticket: int) -> None:
        with self._embedded:
            self._embedded_ticket = max(self._embedded_ticket, ticket)
            self._embedded.notify_all()

    def unembedded_count(self, author: str | None = None) -> int:
        """How many live memories (of `author`, when given) are not embedded yet."""
        if author is None:
            return len(self.rows.unembedded)
        with self.lock.gen_rlock():
            heads = self.rows.heads
            return sum(1 for memory_id in self.rows.unembedded if heads[memory_id].author == author)

    def wait_embedded(self, timeout: float | None = None) -> bool:
        """Wait until every memory stored before this call is embedded (searchable by meaning); False if
        `timeout` (seconds) passed first. Returns at once without a background embedder."""
        target = self._tickets
        if self._embedded_ticket >= target or self.embedding is None:
            return True
        with self._embedded:
            return self._embedded.wait_for(lambda: self._embedded_ticket >= target or self.closed, timeout)

    @replicated
    def update(self, memory_id: str, *, editor: str, editors: dict[str, list[str]], content: str | None = None,
               tags: list[str] | None = None, type: str | None = None, project: str | None = None,
               valid_until: float | None = None, review_after: float | None = None) -> Memory:
        """A new version made by `editor`, who must be the author or granted by `editors` (permissions.py).
        `valid_until` / `review_after`: None leaves them as they are, 0.0 clears them."""
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
            snapshot = version_of(current)
            new_content = current.content if content is None else content
            memory = msgspec.structs.replace(
                current, content=new_content, tags=current.tags if tags is None else tags,
                type=type or current.type, project=project or current.project, updated=time.time(),
                version=current.version + 1, editor=editor, content_hash=content_hash(new_content), labels=labels,
                history=[*current.history, snapshot],
                valid_until=current.valid_until if valid_until is None else valid_until,
                review_after=current.review_after if review_after is None else review_after,
            )
            self._commit([Put(memory=memory, vectors=vecs.astype(np.float32).tobytes())], [(memory, vecs)])
            return memory

    @replicated
    def delete(self, memory_id: str, *, by: str, editors: dict[str, list[str]]) -> Memory:
        """Delete for `by`, who must be the author or granted by `editors` (permissions.py)."""
        with self.lock.gen_wlock():
            if memory_id not in self.memories:
                raise UserError(f"no memory {memory_id!r} in collection {self.name!r}.")
            check_change(editors, by, self.memories[memory_id], "delete")
            memory = self._load(memory_id)
            [(start, end)] = self._append([Delete(id=memory_id, at=time.time(), by=by)])
            self.log.dead_bytes += self.rows.span_bytes(memory_id) + end - start  # as a replay counts them
            gone = self.rows.remove(memory_id)
            self.vectors.remove(gone.labels)
            self.changes_since_save += 1
            self._maintain()
            return memory

    # -- the lifecycle: links, feedback, consolidated memories (one Put each; nothing deleted) --
    @replicated
    def unlink(self, memory_id: str, *, supersedes_id: str | None, by: str, editors: dict[str, list[str]]) -> Memory:
        """Undo supersedes links. `memory_id` is the newer memory (drop its link to `supersedes_id`, or all its
        links when None) or the older one (drop the link of the memory that supersedes it). A link may be undone
        by the author of either side, or an agent `editors` grants over either author: with no `supersedes_id`,
        someone who may change only some older memories drops only the links to those. Returns the newer memory
        as stored."""
        with self.lock.gen_wlock():
            head = self._visible_head(memory_id, by)
            if supersedes_id and supersedes_id == memory_id:
                raise UserError(f"memory {memory_id!r} cannot supersede itself; give the id of the memory it replaces "
                                "as supersedes_id, or leave supersedes_id empty.")
            if head.supersedes and (not supersedes_id or supersedes_id in head.supersedes):
                newer, targets = head, [supersedes_id] if supersedes_id else list(head.supersedes)
            elif supersedes_id:
                raise UserError(f"memory {memory_id!r} does not supersede {supersedes_id!r}"
                                + (f"; it supersedes {', '.join(head.supersedes)}." if head.supersedes else ".")
                                + " memory_get shows a memory's links.")
            elif memory_id in self.rows.successor_of:
                newer, targets = self.memories[self.rows.successor_of[memory_id]], [memory_id]
            else:
                raise UserError(f"memory {memory_id!r} supersedes nothing and nothing supersedes it: there is no link "
                                "to undo.")
            sides = [newer.author] + [self.memories[t].author for t in targets if t in self.memories]
            if not may_edit(editors, by, newer.author):  # then only the links to memories `by` may change
                heads = self.memories
                targets = [t for t in targets if t in heads and may_edit(editors, by, heads[t].author)]
            if not targets:
                raise UserError(f"you are {by!r}; only the authors of the linked memories ({', '.join(sorted(set(sides)))})"
                                " or an agent [memory] editors grants over one of them may undo this link. Ask one of "
                                "them.")
            current = self._load(newer.id)
            now = time.time()
            changes = [LinkChange(action="unlinked", target=t, by=by, at=now, how="unlink") for t in targets]
            return self._rewrite(msgspec.structs.replace(
                current, supersedes=[t for t in current.supersedes if t not in targets],
                link_history=[*current.link_history, *changes]))

    @replicated
    def validate(self, memory_id: str, *, by: str, helpful: bool, note: str = "") -> Memory:
        """Record `by`'s verdict on a memory it can see (its latest verdict replaces its earlier ones in the
        memory's confidence). Returns the memory as stored."""
        if not isinstance(note, str):
            raise UserError("note must be a string (why the memory helped or not), or empty.")
        if len(note) > MAX_NOTE_CHARS:
            raise UserError(f"note is {len(note)} characters; at most {MAX_NOTE_CHARS}. Say why in a sentence or two.")
        with self.lock.gen_wlock():
            self._visible_head(memory_id, by)
            current = self._load(memory_id)
            verdict = Feedback(by=by, at=time.time(), helpful=bool(helpful), note=note.strip())
            return self._rewrite(msgspec.structs.replace(current, feedback=trim_feedback([*current.feedback, verdict])))

    @replicated
    def write_consolidated(self, item: NewMemory, *, author: str) -> dict:
        """Store the consolidated memory `item` (its `memory_id` and `consolidates` set by the caller) for
        `author`, or, when its id exists, make a new version of it with the new content, tags and members (the
        previous one kept in its history). Nothing changes when content, tags and members are the same:
        `{"status": "unchanged"}`. One log append."""
        if not item.memory_id:
            raise ValueError("a consolidated memory needs its deterministic id")
        self._validate_new(item)
        members = list(dict.fromkeys(item.consolidates))
        with self.lock.gen_rlock():
            existing = self.memories.get(item.memory_id)
            same = (existing is not None and existing.consolidates == tuple(members)
                    and existing.tags == tuple(item.tags) and self._load(item.memory_id).content == item.content)
        if same:
            return {"status": "unchanged", "id": item.memory_id}
        if existing is None:
            made = self.store([NewMemory(**{**item.__dict__, "consolidates": members, "supersedes": [],
                                            "detect_supersession": False})], author=author, dedup=False)
            return made[0]
        vecs = self.embedder.embed_chunks([item.content])[0]
        with self.lock.gen_wlock():
            if item.memory_id not in self.memories:
                raise UserError(f"consolidated memory {item.memory_id!r} was deleted meanwhile; run again.")
            current = self._load(item.memory_id)
            if current.author != author:
                raise UserError(f"memory {item.memory_id!r} belongs to {current.author!r}, not {author!r}.")
            labels = current.labels if len(vecs) == len(current.labels) else self.rows.new_labels(len(vecs))
            snapshot = version_of(current)
            memory = msgspec.structs.replace(
                current, content=item.content, tags=list(item.tags), consolidates=members, updated=time.time(),
                version=current.version + 1, editor=item.editor or current.editor,
                content_hash=content_hash(item.content), labels=labels, history=[*current.history, snapshot])
            self._commit([Put(memory=memory, vectors=vecs.astype(np.float32).tobytes())], [(memory, vecs)])
            return {"status": "updated", "id": memory.id, "chunks": len(labels)}

    @replicated
    def restore_lifecycle(self, memory_id: str, *, supersedes: list[str], link_history: list[LinkChange],
                          feedback: list[Feedback]) -> bool:
        """Give a memory an import just stored its exported links, link history and feedback, as they were (no
        permission checks: the operator's import). One log append, and none when they are already so. Returns
        whether it wrote."""
        with self.lock.gen_wlock():
            if memory_id not in self.memories:
                raise UserError(f"no memory {memory_id!r} in collection {self.name!r}.")
            current = self._load(memory_id)
            wanted = (list(supersedes), list(link_history), trim_feedback(list(feedback)))
            if (current.supersedes, current.link_history, current.feedback) == wanted:
                return False
            self._rewrite(msgspec.structs.replace(current, supersedes=wanted[0], link_history=wanted[1],
                                                  feedback=wanted[2]))
            return True

    def lifecycle_of(self, memory_id: str, now: float | None = None) -> dict:
        """A memory's place in the lifecycle: its links both ways, supersession chain, feedback, use, tier and
        staleness (what memory_get and the dashboard show)."""
        now = time.time() if now is None else now
        with self.lock.gen_rlock():
            head = self.memories.get(memory_id)
            if head is None:
                raise UserError(f"no memory {memory_id!r} in collection {self.name!r}; memory_search finds ids.")
            feedback = self._load(memory_id).feedback
            up, down = votes(feedback, head.author)
            count, last = self.usage_of(memory_id)
            linked = [*head.supersedes, *head.consolidates]
            return {
                "superseded_by": self.rows.successor_of.get(memory_id),
                "supersedes": list(head.supersedes),
                "chain": self.rows.chain(memory_id),
                "consolidated_into": self.rows.consolidated_into.get(memory_id),
                "consolidates": list(head.consolidates),
                "links_gone": [t for t in linked if t not in self.memories],  # linked, deleted since
                "confidence": round(head.confidence, 4),
                "feedback": {"helpful": up, "unhelpful": down},
                "retrievals": count,
                "last_retrieved": last or None,
                "tier": tier(head.type, is_private(self.config, self.name)),
                "valid_until": head.valid_until,
                "review_after": head.review_after,
                "expired": expired(head.valid_until, now),
                "review_due": review_due(head.review_after, now),
            }

    def due(self, now: float) -> tuple[list[Head], list[Head]]:
        """(due for review, expired): live memories whose review_after, or valid_until, has passed; soonest
        first. An expired memory is listed as expired only."""
        with self.lock.gen_rlock():
            gone = sorted((h for h in self.memories.values() if expired(h.valid_until, now)),
                          key=lambda h: h.valid_until)
            review = sorted((h for h in self.memories.values()
                             if review_due(h.review_after, now) and not expired(h.valid_until, now)),
                            key=lambda h: h.review_after)
            return review, gone

    def is_current(self, head: Head, now: float | None = None) -> bool:
        """Neither superseded nor expired: what a briefing or recall may offer (hold the read lock)."""
        return self.rows.is_current(head, time.time() if now is None else now)

    def _visible_head(self, memory_id: str, agent: str) -> Head:
        """The live head of `memory_id` if `agent` may see it (in a private collection, only its own)."""
        head = self.memories.get(memory_id)
        check_visible(self.config, self.name, agent, head, memory_id)
        return head

    def _rewrite(self, memory: Memory) -> Memory:
        """Log `memory` with only lifecycle fields changed: same version, text, labels and vectors. Write lock
        held."""
        entry = self._entry(memory.id)  # not embedded yet: it stays so, still asking for detection if it did
        vecs = matrix(entry.vectors, self.embedder.dim)
        self._commit([Put(memory=memory, vectors=entry.vectors, detect=entry.detect)], [(memory, vecs)])
        return memory

    def _check_supersedes(self, item: NewMemory, owner: str, editors: dict[str, list[str]]) -> list[str]:
        """The distinct ids `item.supersedes` names, each checked: a live memory of this collection, not the
        new one, that `owner` may see and change. Write lock held."""
        targets = list(dict.fromkeys(item.supersedes))
        for target in targets:
            if item.memory_id is not None and target == item.memory_id:
                raise UserError(f"memory {target!r} cannot supersede itself; remove it from supersedes.")
            head = self.memories.get(target)
            if head is None or not visible_to(self.config, self.name, owner, head):
                raise UserError(f"supersedes names {target!r}, but there is no memory {target!r} in collection "
                                f"{self.name!r}. Give the id of a stored memory (memory_search finds ids), or "
                                "leave supersedes empty.")
            check_change(editors, owner, head, "supersede")
        return targets

    def _may_detect(self, item: NewMemory) -> bool:
        """Look for a memory this one restates? Not in private collections (session turns are pieces of one
        conversation) and not for bootstrap or consolidated entries."""
        return (self.config.supersede_detect and not is_private(self.config, self.name)
                and item.type not in BOOTSTRAP_TYPES and item.type != CONSOLIDATED_TYPE)

    def _commit(self, puts: list[Put], pending: list[tuple[Memory, np.ndarray]], *, sync: bool = True,
                seq: int | None = None) -> int:
        """Log, then apply to the rows and the index; returns the log offset after the entries. With `sync`, the
        entries are durable on return; without, the caller releases the lock and calls `_sync` with that offset
        before acknowledging them. A memory whose `vecs` are empty (none of its labels) waits for the background
        embedder. `seq`: applying a write from the memory stream (apply_replicated). Caller holds the write lock."""
        if not puts:
            return 0
        spans = self._append(puts, sync=sync, seq=seq)  # raises: nothing applied, nothing acknowledged
        for (memory, vecs), span in zip(pending, spans, strict=True):
            if memory.id in self.memories:
                self.log.dead_bytes += self.rows.span_bytes(memory.id)
            was_pending = memory.id in self.rows.unembedded
            embedded = len(vecs) == len(memory.labels)
            old, head = self.rows.put(memory, span, embedded=embedded)
            if old is not None and old.labels != memory.labels:
                self.vectors.remove(old.labels)  # labels never embedded are not in the graph: nothing to do
            if not embedded:
                continue
            if old is None or old.labels != memory.labels or was_pending:
                self.vectors.add(memory.labels, vecs)
            elif old.dedup_key != head.dedup_key:  # new text (or project) under the same labels
                self.vectors.replace(memory.labels, vecs)
        self.changes_since_save += len(puts)
        self._maintain()
        return spans[-1][1]

    def _append(self, entries: list, *, sync: bool = True, seq: int | None = None) -> list[tuple[int, int]]:
        """Log (durably with `sync`). A failed write (disk full, I/O error) leaves the log as it was and is
        reported as a UserError saying nothing was stored. On a cluster, the entries are first published to the
        memory stream (Behind when another node wrote first; ReplicationFailed when the cluster does not take
        them): `seq` is where they are in it, given when they come from the stream (apply_replicated)."""
        published = seq is None and self.replication is not None
        if published:
            seq = self.replication.publish(self.name, entries, self.rows.applied_seq)
        if seq is not None:
            for entry in entries:
                entry.seq = seq
            self._since_snapshot += len(entries)
        try:
            spans = self.log.append(entries) if sync else self.log.write(entries)
            if published:  # (a write from the stream counts as applied once all its entries are: apply_replicated)
                self._applied_to(seq)
            return spans
        except OSError as exc:
            log.error("collection %s: could not append to %s: %s", self.name, self.log.path, exc)
            if sync:
                self._recover_log()
            if seq is not None:  # the cluster has it: the other nodes apply it, and this one when it can
                raise WriteFailed(write_failed(self.folder, exc, "the cluster stored this write, but this node could "
                                               "not log it; the other nodes have it, and this node applies it once "
                                               "it can write again (restart it)")) from None
            raise WriteFailed(write_failed(self.folder, exc, "nothing was stored or changed")) from None

    def _sync(self, end: int, stored: list[str]) -> None:
        """Return once the log is on the disk up to `end` (group commit: log.sync_to). No lock held. If the
        fsync fails, the log is cut back to its last fsynced frame and the memories `stored` (written by the
        caller, applied already) are taken out again: the caller is told nothing was stored, and nothing was."""
        if not end or self.replication is not None:  # on a cluster the stream holds it (a crash re-applies it)
            return
        try:
            self.log.sync_to(end)
        except OSError as exc:
            log.error("collection %s: could not fsync %s: %s", self.name, self.log.path, exc)
            with self.lock.gen_wlock():
                self._recover_log()
                for memory_id in stored:
                    if memory_id in self.memories and self.rows.span(memory_id)[1] > self.log.synced:
                        self.vectors.remove(self.rows.remove(memory_id).labels)
            raise WriteFailed(write_failed(self.folder, exc, "nothing was stored")) from None

    def _recover_log(self) -> None:
        """Cut the log back to its last fsynced frame after a failed fsync (log.recover). Write lock held."""
        try:
            self.log.recover()
        except OSError as exc:
            log.error("collection %s: could not cut %s back after a failed fsync (%s); it takes no writes until "
                      "the server is restarted", self.name, self.log.path, exc)

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
        if len(item.reply_to) > MAX_QUESTION_CHARS:
            raise UserError(f"reply_to is {len(item.reply_to)} characters; at most {MAX_QUESTION_CHARS}.")
        if item.memory_id is not None and not ID_RE.match(item.memory_id):
            raise UserError(f"invalid memory id {item.memory_id!r}: 1-128 letters, digits, '_', ':', '.', '-'.")

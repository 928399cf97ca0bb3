"""One collection: the record log (truth), the rows and the vector index (derived), behind one lock.

This is the collection's face: it holds the state and opens, reads, searches and closes; each write is a function
of writing/ bound here as a method, and a collaborator keeps each side job:
- writing/storing.py     store: dedup checks (lifecycle/dedup.py) -> labels -> log -> rows (found by keyword
                         from here on) -> release the lock -> group fsync (store/log.py) -> acknowledge
- writing/changes.py     update, delete, unlink, validate, consolidated memories, an import's lifecycle
- writing/embedded.py    the background embedder (embedding/background.py) logs each memory with its vectors
- writing/commit.py      the end of every write: log, then rows and index; compaction and index saves
- cluster/collection_stream.py  on a cluster: following the memory stream (writing/from_stream.py applies it)
- store/retrievals.py    how often each memory was retrieved (statistics, saved with the index)
- embedding/tickets.py   numbered stores a search waits for
- lifecycle/restatement.py  which older memories each memory may restate (store replies, searches, briefings)
A write that returned is in the log; everything else can be rebuilt from it (store/replay.py, on open).
Read path: embed the query outside the lock -> read lock -> rank the rows (search/ranking.py) -> read the
winners' entries back from the log.

At rest, with encryption on (`sealer`, persmem_core.sdk.Sealer): every log frame, the index file and the
retrieval counts are sealed (store/log.py, store/vectors.py); only the model record (a model id) stays plain.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
from readerwriterlock import rwlock

from persmem_core.sdk import Sealer, UserError

from .cluster.collection_stream import CollectionStream
from .config import MemoryConfig
from .embedding.tickets import EmbeddingTickets
from .lifecycle.restatement import Restatements, replaced_by, worked_out
from .permissions import check_visible, is_private
from .search.ranking import Hit, rank
from .store.retrievals import RetrievalCounts
from .search.weighing import LifecycleView, expired, review_due, tier
from .store.heap import release_freed_memory
from .store.log import LOG_NAME, RecordLog, WriteFailed, decode_frame
from .store.query import Filters
from .store.records import Head, Memory, Put, summarize, votes
from .store.replay import (INDEX_NAME, check_model, drop_checkpoint, load_index, matrix, open_rows, rebuild_index,
                           record_model, reembed_all, save_checkpoint)
from .store.rows import Rows
from .store.vectors import VectorIndex
from .writing import changes, embedded, from_stream, storing
from .store.new_memory import NewMemory

log = logging.getLogger("persmem.memory")

__all__ = ["Collection", "Hit", "NewMemory", "WriteFailed"]

MAX_RESTATEMENTS_FOLLOWED = 3  # later restatements of a restatement a briefing follows


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
        self.lock = rwlock.RWLockWrite()
        self.log = RecordLog(self.folder / LOG_NAME, self.sealer)
        self.rows = Rows()
        self.vectors: VectorIndex | None = None
        self.changes_since_save = 0
        self.upkeep_after = 0.0  # monotonic time before which upkeep (writing/commit.maintain) waits, after a failure
        self.replication = replication
        self.tickets = EmbeddingTickets()  # stores queued for the background embedder; a search waits for them
        self.retrievals = RetrievalCounts(name, self.folder, self.sealer)
        self.stream = CollectionStream(self, replication)
        self.restatements = Restatements()  # which older memories each memory may restate (worked out on use)

    @property
    def memories(self) -> dict[str, Head]:
        """The live memories' heads by id (hold the lock while you iterate)."""
        return self.rows.heads

    @property
    def next_label(self) -> int:
        return self.rows.next_label

    # -- writing (writing/), bound here as methods ------------------------------------------------------------------
    store = storing.store
    update = changes.update
    delete = changes.delete
    unlink = changes.unlink
    link = changes.link
    validate = changes.validate
    write_consolidated = changes.write_consolidated
    restore_lifecycle = changes.restore_lifecycle
    embed_pending = embedded.embed_pending
    apply_replicated = from_stream.apply

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
        self.retrievals.load(self.rows.heads)
        if reindex:
            reembed_all(self.log, self.rows, self.vectors, self.embedder, self.memory_of)
            record_model(self.folder, self.embedder)
            self.save_index()
            return self
        check_model(self.folder, self.name, self.embedder, bool(self.memories))
        if not load_index(self.name, self.folder, self.log, self.rows, self.vectors, self.embedder.model_id,
                          self.embedder.dim):
            rebuild_index(self.name, self.rows, self.vectors, self.logged_vectors)
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
                self.queue_embedding(pending)
        return self

    def close(self) -> None:
        self.stream.stop()
        with self.lock.gen_wlock():
            self.closed = True
            try:
                if self.changes_since_save and self.vectors is not None:
                    self.save_index()
                elif self.retrievals.changed:
                    self.retrievals.save(self.rows.heads)
            except OSError as exc:  # the index is derived: the next open rebuilds it from the log
                log.warning("collection %s: could not save the index on close (%s)", self.name, exc)
            self.log.close()
        self.tickets.wake()

    def save_index(self) -> None:
        self.vectors.save(self.folder / INDEX_NAME, model_id=self.embedder.model_id, log_offset=self.log.size,
                          sealer=self.sealer)
        save_checkpoint(self.folder, self.log, self.rows, self.vectors, self.embedder.model_id)
        self.changes_since_save = 0
        self.retrievals.save(self.rows.heads)
        if self.stream.snapshot_due():
            self.stream.publish_snapshot()

    # -- on a cluster (cluster/collection_stream.py) -------------------------------------------------------------
    def follow(self) -> None:
        """Follow the memory stream and return once this node has caught up (CollectionStream.follow)."""
        self.stream.follow()

    def wait_applied(self, seq: int, timeout: float | None = 30.0) -> None:
        """Return once the stream's writes up to `seq` are applied here (CollectionStream.wait_applied)."""
        self.stream.wait_applied(seq, timeout)

    # -- retrieval counts (store/retrievals.py) ----------------------------------------------------------------
    def record_retrievals(self, ids: list[str], *, by: str | None = None) -> None:
        """Count one retrieval of each of `ids`, returned by a search of `by` (RetrievalCounts.record)."""
        self.retrievals.record(ids, self.rows.heads, by=by)

    def usage_of(self, memory_id: str) -> tuple[int, float]:
        """(retrievals, last retrieved at); (0, 0.0) for a memory never returned by a search."""
        return self.retrievals.of(memory_id)

    # -- the background embedder (embedding/background.py, embedding/tickets.py) --------------------------------
    def queue_embedding(self, memory_ids: list[str]) -> None:
        """Number `memory_ids` (logged without vectors) and hand them to the background embedder. Write lock
        held (or the collection is opening)."""
        self.embedding.submit(self, list(zip(memory_ids, self.tickets.issue(len(memory_ids)))))

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
        if self.embedding is None:
            return True
        return self.tickets.wait(timeout, lambda: self.closed)

    def compact(self) -> None:
        """Rewrite the log with only the live memories' latest entries, copied as they are."""
        ids = sorted(self.memories, key=lambda memory_id: self.rows.span(memory_id)[0])
        drop_checkpoint(self.folder, self.rows)  # before the log is replaced: never a checkpoint of another log
        spans = self.log.rewrite(self.log.read(*self.rows.span(memory_id)) for memory_id in ids)
        for memory_id, span in zip(ids, spans, strict=True):
            self.rows.set_span(memory_id, span)
        self.save_index()
        log.info("collection %s: compacted the log to %d bytes", self.name, self.log.size)

    # -- the log entries behind the heads (hold the lock: a compaction swaps the log file) ----------------------
    def entry_of(self, memory_id: str) -> Put:
        """A live memory's latest log entry."""
        return decode_frame(self.log.read(*self.rows.span(memory_id)), self.sealer, self.log.path)

    def memory_of(self, memory_id: str) -> Memory:
        return self.entry_of(memory_id).memory

    def logged_vectors(self, memory_id: str) -> np.ndarray:
        """The exact float32 vectors of a live memory, from its latest log entry."""
        return matrix(self.entry_of(memory_id).vectors, self.embedder.dim)

    # -- reading --------------------------------------------------------------------------------------------------
    def get(self, memory_id: str) -> Memory:
        """The whole memory (text and history included)."""
        with self.lock.gen_rlock():
            if memory_id not in self.memories:
                raise UserError(f"no memory {memory_id!r} in collection {self.name!r}; memory_search finds ids.")
            return self.memory_of(memory_id)

    def get_many(self, memory_ids: list[str]) -> list[Memory]:
        """The whole memories of those ids that are still live, in the given order."""
        with self.lock.gen_rlock():
            return [self.memory_of(memory_id) for memory_id in memory_ids if memory_id in self.memories]

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
                             private=is_private(self.config, self.name), usage=self.retrievals.counts,
                             restates=self.restates, restated_later=self.restatements.later)
        # In a private collection a search for one author (each agent's own, permissions.own_filters) ranks that
        # author's rows alone, by their own keyword statistics: the others' words never move its scores.
        visible = filters.author if view.private else None
        with self.lock.gen_rlock():
            ranked = rank(self.rows, self.vectors, self.config, query, qvec, top_k=top_k, filters=filters, mode=mode,
                          candidates=candidates or self.config.search_candidates, lifecycle=view,
                          visible_author=visible)
            at_row = self.rows.at_row
            return [Hit(memory=self.memory_of(at_row[r.row].id), score=r.score, dense=r.dense, lexical=r.lexical,
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
            return [self.memory_of(m.id) for m in found]

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

    def vectors_now(self, memory_id: str) -> np.ndarray:
        """A live memory's vectors: logged, or made now when it is not embedded yet. Lock held."""
        if memory_id in self.rows.unembedded:
            return self.embedder.embed_chunks([self.memory_of(memory_id).content])[0]
        return self.logged_vectors(memory_id)

    def restates(self, head: Head) -> tuple[str, ...]:
        """The older memories `head` most likely restates (lifecycle/restatement.py): a search ranks them below
        it, a briefing shows it instead of them. Lock held."""
        return self.restatements.below(head, self.rows, lambda h: worked_out(self, h))

    def replacement_of(self, memory_id: str) -> Memory | None:
        """The latest memory restating `memory_id` (following later restatements of it, a few steps), as a
        briefing shows it instead; None when nothing restates it (lifecycle/restatement.py)."""
        with self.lock.gen_rlock():
            head, latest = self.memories.get(memory_id), None
            for _ in range(MAX_RESTATEMENTS_FOLLOWED):
                head = replaced_by(self, head) if head is not None else None
                if head is None:
                    break
                latest = head
            return None if latest is None else self.memory_of(latest.id)

    # -- the lifecycle as the tools and panels show it -------------------------------------------------------------
    def lifecycle_of(self, memory_id: str, now: float | None = None) -> dict:
        """A memory's place in the lifecycle: its links both ways, supersession chain, feedback, use, tier and
        staleness (what memory_get and the dashboard show)."""
        now = time.time() if now is None else now
        with self.lock.gen_rlock():
            head = self.memories.get(memory_id)
            if head is None:
                raise UserError(f"no memory {memory_id!r} in collection {self.name!r}; memory_search finds ids.")
            feedback = self.memory_of(memory_id).feedback
            up, down = votes(feedback, head.author)
            count, last = self.retrievals.of(memory_id)
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

    def visible_head(self, memory_id: str, agent: str) -> Head:
        """The live head of `memory_id` if `agent` may see it (in a private collection, only its own)."""
        head = self.memories.get(memory_id)
        check_visible(self.config, self.name, agent, head, memory_id)
        return head

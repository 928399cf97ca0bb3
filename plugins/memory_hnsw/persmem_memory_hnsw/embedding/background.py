"""The background embedder: stores are acknowledged once logged, and embedded here, in batches, afterwards.

A `memory_store` is durable when its log entry is fsynced (collection.py); its vectors cost a model run of
several milliseconds, which would otherwise be most of every store. So a store is logged with its labels
reserved and no vectors (`Rows.unembedded`), found by keyword at once, and handed to this one thread per
service, which embeds what has queued up (up to `[memory] embed_batch` at a time: batches are several times
faster per text than one by one) and has the collection log each memory again with its vectors
(`Collection.embed_pending`). A crash before that loses nothing: the log holds the text, and opening the
collection queues every memory still without vectors again.

Each collection numbers the memories it queues (tickets); a search that needs vectors waits, for a bounded time
(`[memory] search_waits_ms`), until those queued before it are embedded (`Collection.wait_embedded`), so a store
followed by a search finds it by meaning too, while a bulk load in progress never holds searches up for longer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

log = logging.getLogger("persmem.memory.embedding")

RETRY_AFTER = 5.0  # seconds before a batch whose log write failed (a full disk) is tried again


class BackgroundEmbedder:
    def __init__(self, batch: int = 64):
        self.batch = batch
        self._queue: deque = deque()  # (collection, memory id, ticket), in the order they were queued
        self._cv = threading.Condition()
        self._busy = False  # a batch taken from the queue is being embedded
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> BackgroundEmbedder:
        self._thread = threading.Thread(target=self._run, name="memory-embedder", daemon=True)
        self._thread.start()
        return self

    def submit(self, collection, items: list[tuple[str, int]]) -> None:
        """Queue `items` (memory id, ticket) of `collection` for embedding."""
        if not items:
            return
        with self._cv:
            self._queue.extend((collection, memory_id, ticket) for memory_id, ticket in items)
            self._cv.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until the queue is empty and no batch is in progress; False if `timeout` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._queue or self._busy:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def stop(self, *, drain: bool = False) -> None:
        """Stop the thread; with `drain`, after embedding everything queued (a CLI command). What is left is
        embedded when the collection is opened again."""
        if self._thread is None:
            return
        if drain:
            self.drain()
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._thread.join()
        self._thread = None

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._stopping:
                    self._cv.wait()
                if self._stopping:
                    return
                taken = [self._queue.popleft() for _ in range(min(self.batch, len(self._queue)))]
                self._busy = True
            try:
                self._embed(taken)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def _embed(self, taken: list) -> None:
        by_collection: dict[int, tuple[object, list[tuple[str, int]]]] = {}
        for collection, memory_id, ticket in taken:
            by_collection.setdefault(id(collection), (collection, []))[1].append((memory_id, ticket))
        for collection, items in by_collection.values():
            try:
                collection.embed_pending(items)
            except Exception as exc:  # noqa: BLE001 - kept and tried again: the memories are safe in the log
                if getattr(collection, "closed", False):
                    continue  # closed meanwhile: opening it again queues them
                log.warning("collection %s: embedding %d memories failed (%s); trying again in %.0f s",
                            collection.name, len(items), exc, RETRY_AFTER)
                with self._cv:
                    self._cv.wait_for(lambda: self._stopping, RETRY_AFTER)
                    if self._stopping:
                        return
                    self._queue.extendleft((collection, m, t) for m, t in reversed(items))

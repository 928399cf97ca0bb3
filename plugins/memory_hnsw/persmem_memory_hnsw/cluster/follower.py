"""Following one collection's part of the memory stream on this node (the NATS side; cluster/collection_stream.py is the
collection's): an ordered push consumer from `applied_seq + 1` puts the messages in a queue, and a thread opens
each (checking it is a write of this collection, in its place) and hands them, in order and in batches, to
`Collection.apply_replicated`. `Replication.follow` starts one per collection.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable

from persmem_core.sdk import FrameRefused, SealingError

from .stream_names import BEFORE, STREAM, subject

log = logging.getLogger("persmem.memory")

APPLY_BATCH = 512  # messages a follower hands over at once (one write lock)
QUEUE_LIMIT = 2048  # messages received and not applied yet, at most (then the consumer waits)


class Follower:
    """Applies one collection's stream, in order, from `after + 1`: an ordered consumer puts messages in a queue,
    a thread hands them to `apply` in batches."""

    def __init__(self, replication, collection: str, after: int,
                 apply: Callable[[list[tuple[int, list]]], None]):
        self.replication, self.collection, self.after, self.apply = replication, collection, after, apply
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=f"memory-follow-{collection}", daemon=True)
        self._subscription = None
        self._stopped = False
        self._last = None  # the sequence of the last message of the collection received (None: none yet)
        self.failed: BaseException | None = None  # what stopped it applying (the log has the traceback)

    def start(self) -> Follower:
        from nats.js.api import ConsumerConfig, DeliverPolicy

        link = self.replication.link

        async def _received(msg):
            self._queue.put((msg.metadata.sequence.stream, msg.data, msg.headers or {}))
            while self._queue.qsize() > QUEUE_LIMIT and not self._stopped:  # the applier is behind: hold the
                await asyncio.sleep(0.01)  # consumer (flow control pauses the server), not a growing queue

        async def _subscribe():
            if self.after:
                config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=self.after + 1)
            else:
                config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
            return await link.js.subscribe(subject(self.collection), stream=STREAM, cb=_received,
                                           ordered_consumer=True, config=config, idle_heartbeat=2.0)

        self._subscription = self.replication._run(_subscribe, "follow the collection")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped = True
        self._queue.put(None)
        if self._subscription is not None:
            try:
                self.replication.link.run(self._subscription.unsubscribe(), timeout=2)
            except Exception:  # noqa: BLE001 - closing anyway
                pass
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stopped:
            item = self._queue.get()
            batch = []
            while item is not None:
                seq, data, headers = item
                try:
                    batch.append((seq, self._open(seq, data, headers)))
                except FrameRefused as exc:  # not a node's write for this place: passed over on every node alike
                    log.error("memory: a write to %s was refused, not applied: %s", self.collection, exc)
                    batch.append((seq, []))
                except SealingError as exc:  # another key: applying nothing more is right, skipping would lose data
                    log.error("memory: stream message %d of %s does not open with this node's key (%s); this node "
                              "stops following it. Every node of a cluster needs the same key.", seq,
                              self.collection, exc)
                    self.failed = exc
                    return
                except Exception:  # noqa: BLE001 - garbage no persmem node wrote: passed over, its place kept
                    log.exception("memory: stream message %d of %s is not a persmem write; passed over", seq,
                                  self.collection)
                    batch.append((seq, []))
                if len(batch) >= APPLY_BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    item = False
                    break
            if batch:
                try:
                    self.apply(batch)
                except Exception as exc:  # noqa: BLE001 - stop here rather than apply later writes over a gap
                    log.exception("memory: applying stream messages %d-%d of %s failed; this node stops following "
                                  "it (writes to it wait, then fail) until the server is restarted", batch[0][0],
                                  batch[-1][0], self.collection)
                    self.failed = exc
                    return
            if item is None:
                return

    def _open(self, seq: int, data: bytes, headers: dict) -> list:
        """A received message's entries once it opens as a write of this collection whose "before" is the message
        received before it (the first one's is asked of the stream). FrameRefused otherwise."""
        last, self._last = self._last, seq
        entries = self.replication.open_write(seq, data, self.collection, headers)
        if not self.replication.binding.on or seq < self.replication.binding.bound_from:
            return entries  # unbound: written before binding began, or no key to bind with
        before = int(headers.get(BEFORE, "-1"))  # opened, so it is the number it was sealed with
        if last is not None:
            in_place = before == last
        else:
            in_place = self.replication.previous_on_subject(self.collection, before, seq)
        if not in_place:
            raise FrameRefused(f"{STREAM} sequence {seq} was sealed to follow the write at {before}, but it follows "
                               f"{last if last is not None else 'another one'}: it is an earlier write published "
                               "again (replayed), and is refused (check who can reach the NATS servers: `persmem "
                               "doctor`)")
        return entries


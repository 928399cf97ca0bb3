"""Replicated memory on a NATS JetStream cluster (docs/scale-out.md): every collection's log entries are published
to one stream, and every persmem node applies that stream to its own log, rows and index.

- The stream `PERSMEM_MEMORY` (subjects `persmem.memory.<collection>`, [cluster] replicas copies, file storage)
  is the truth a node's collection follows. One message is one write's log entries (collection.py `_append`):
  a store of a batch, an update, a delete, a link, an embedded memory. Each entry carries the message's stream
  sequence in the node's own log (`Put.seq`, `Delete.seq`), so a node knows exactly where it stopped
  (`Rows.applied_seq`) and resumes after it.
- A write is published with `Nats-Expected-Last-Subject-Sequence` = the collection's `applied_seq`: JetStream
  stores it only if nothing else was written to that collection since this node last applied, so every node
  applies the same writes in the same order (compare-and-set on the whole collection). When another node wrote
  first, `publish` raises `Behind`; the writer waits until the follower has applied that (`Collection.
  _replicated`) and makes its write again, against the new state. The write is acknowledged once JetStream's
  PubAck says a majority of the replicas stored it (and the node applied it: read-your-writes on that node).
- A `Follower` per collection is an ordered push consumer from `applied_seq + 1`; a thread hands what arrives,
  in order and in batches, to `Collection.apply_replicated`.
- A new node (a collection folder without a log) starts from the newest snapshot in the object store
  `persmem_memory_snapshots` (the collection's files as some node saved them, and the sequence they reach)
  and follows the stream from there (`restore_snapshot`, `publish_snapshot`).
- With [encryption] enabled, messages and snapshots are sealed with the home's key: every node of one cluster
  needs the same key file. Each is bound to its place (persmem_core.sdk.StreamBinding, docs/scale-out.md):
  a write's associated data names its subject (the collection), its message id and the sequence of the write
  before it on that subject (`Nats-Expected-Last-Subject-Sequence`), so a write copied to another collection (a
  private one's turns into a shared one), replayed later in the same one, or not sealed at all does not open: it
  is logged and passed over on every node alike, its place kept. A follower checks each write's "before" against
  the write it received before it (and the first one against the stream). A snapshot is sealed as a whole with
  its collection and the sequence it reaches; one that does not open is not used (the node replays the stream).
  Writes stored by an earlier persmem (before the stream's first marker, `persmem.memory._binding`) and its
  snapshots read as before: the writes as they are, the snapshots not at all (the stream is replayed instead).
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import secrets
import shutil
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from persmem_core.sdk import (
    FrameRefused,
    KeyNotOnHand,
    Sealer,
    SealingError,
    StreamBinding,
    UserError,
    bound_purpose,
    is_sealed,
    stream_problems,
)

from ..store.log import WriteFailed
from ..store.records import Entry

log = logging.getLogger("persmem.memory")

STREAM = "PERSMEM_MEMORY"
SUBJECT_PREFIX = "persmem.memory."
SNAPSHOTS = "persmem_memory_snapshots"  # object store bucket: one object per collection, its newest snapshot
PURPOSE = b"memory.replica"  # what a stream message was sealed as before messages were bound to their place
WRITE_KIND = b"persmem.memory.write"  # what a bound stream message is sealed as (with its place: StreamBinding)
SNAPSHOT_KIND = b"persmem.memory.snapshot"  # a snapshot, sealed with its collection and the sequence it reaches
MARKER = SUBJECT_PREFIX + "_binding"  # the stream's binding marker (no collection is called that)
BEFORE = "Nats-Expected-Last-Subject-Sequence"  # the header holding the write before this one on its subject
MAX_MESSAGE = 8 << 20  # a bulk store of 1,000 memories with their text fits; the stream refuses larger
REFUSE_AFTER_TIMEOUT = 5.0  # seconds writes are refused at once after one waited the whole timeout (no quorum):
# a write waits for the cluster under its collection's write lock, which holds that node's searches of it too
APPLY_BATCH = 512  # messages a follower hands over at once (one write lock)
QUEUE_LIMIT = 2048  # messages received and not applied yet, at most (then the consumer waits)
SNAPSHOT_FILES = ("records.log", "vectors.hnsw", "vectors.hnsw.meta.json", "checkpoint.bin", "checkpoint.bin.meta.json",
                  "model.json")

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[Entry])


class Behind(Exception):
    """Another node wrote to the collection since this one last applied: apply up to `last_seq`, then write again."""

    def __init__(self, last_seq: int):
        super().__init__(f"the collection's stream is at {last_seq}")
        self.last_seq = last_seq


class ReplicationFailed(WriteFailed):
    """The cluster did not take a write (no quorum, or it did not answer in time), or this node is not caught up
    with it: calling again later may succeed."""


def subject(collection: str) -> str:
    return SUBJECT_PREFIX + collection


class Replication:
    """The memory stream of one persmem node: publishing writes, following collections, snapshots."""

    def __init__(self, link, sealer: Sealer, *, replicas: int, timeout: float):
        self.link, self.sealer, self.replicas, self.timeout = link, sealer, replicas, timeout
        self.binding = StreamBinding(link, sealer, STREAM, WRITE_KIND, MARKER, PURPOSE)
        self._verified: set[str] = set()  # collections one of whose writes opened (collections())
        self._unverified: set[str] = set()  # those none did, logged once
        self._followers: list[Follower] = []
        self._watcher = None
        self._known: set[str] = set()  # collections watch_collections has reported
        self._refuse_until = 0.0  # monotonic time before which writes are refused at once (after one timed out)

    # -- the stream ---------------------------------------------------------------------------------------
    def ensure_stream(self) -> None:
        """Create the stream (and the snapshot bucket) if this is the first node; refuse a stream of another
        shape."""
        from nats.js.api import StorageType, StreamConfig
        from nats.js.errors import NotFoundError

        async def _ensure():
            js = self.link.js
            try:
                info = await js.stream_info(STREAM)
            except NotFoundError:
                info = await self.link.placed(lambda: js.add_stream(StreamConfig(
                    name=STREAM, subjects=[SUBJECT_PREFIX + ">"], storage=StorageType.FILE,
                    num_replicas=self.replicas, max_msg_size=MAX_MESSAGE, duplicate_window=120.0, allow_direct=True,
                    description="persmem: every collection's memory log entries (docs/scale-out.md)")),
                    f"the memory stream {STREAM}", self.replicas)
            try:
                await js.object_store(SNAPSHOTS)
            except NotFoundError:
                from nats.js.api import ObjectStoreConfig

                await self.link.placed(lambda: js.create_object_store(SNAPSHOTS, config=ObjectStoreConfig(
                    bucket=SNAPSHOTS, replicas=self.replicas, storage=StorageType.FILE,
                    description="persmem: the newest snapshot of each memory collection")),
                    f"the snapshot bucket {SNAPSHOTS}", self.replicas)
            await self.binding.establish()
            return info

        # Placing the stream and the bucket each waits up to connect_timeout_seconds for a cluster still forming
        # (then ClusterUnavailable says what is missing).
        info = self._run(_ensure, "create the memory stream",
                         timeout=2 * (self.link.config.connect_timeout_seconds + self.timeout))
        if info.config.num_replicas != self.replicas:
            log.warning("memory stream %s has %d replicas, [cluster] replicas says %d (the stream is left as it is)",
                        STREAM, info.config.num_replicas, self.replicas)

    def stream_report(self) -> tuple[list[str], str]:
        """For doctor: (problems, summary) of the memory stream: writes, collections, replicas, leader, and replicas
        that are offline or behind."""
        from nats.js.errors import NotFoundError

        async def _look():
            try:
                return await self.link.js.stream_info(STREAM, subjects_filter=SUBJECT_PREFIX + ">")
            except NotFoundError:
                return None

        info = self._run(_look, "describe the memory stream")
        if info is None:
            return [], f"stream {STREAM} not made yet (the first persmem node on the cluster makes it)"
        problems = stream_problems(info, self.replicas)
        cluster = info.cluster
        leader = f", leader {cluster.leader}" if cluster and cluster.leader else ""
        subjects = dict(info.state.subjects or {})
        markers = subjects.pop(MARKER, 0)
        return problems, (f"stream {STREAM}: {info.state.messages - markers} write(s) to {len(subjects)} "
                          f"collection(s), replicas {info.config.num_replicas}{leader}")

    def collections(self) -> list[str]:
        """The collections the stream holds writes of (some may not be open on this node yet). A subject that only
        writes nobody can open were published to (a name someone without the key made up) is left out."""
        info = self._run(lambda: self.link.js.stream_info(STREAM, subjects_filter=SUBJECT_PREFIX + ">"),
                         "list collections")
        names = sorted(name[len(SUBJECT_PREFIX):] for name in (info.state.subjects or {}) if name != MARKER)
        return [name for name in names if self._made_by_a_node(name)]

    def _made_by_a_node(self, collection: str, look_at: int = 8) -> bool:
        """Whether one of the collection's first `look_at` writes opens as a write of it (remembered once so)."""
        from nats.js.errors import NotFoundError

        if not self.binding.on or collection in self._verified:
            return True
        seq = 1
        for _ in range(look_at):
            async def _next(after=seq):
                try:
                    return await self.link.js.get_msg(STREAM, seq=after, subject=subject(collection), next=True)
                except NotFoundError:
                    return None

            msg = self._run(_next, "check a collection's writes")
            if msg is None:
                break
            try:
                self.open_write(msg.seq, msg.data or b"", collection, msg.headers or {})
            except FrameRefused:
                seq = msg.seq + 1
                continue
            except Exception:  # noqa: BLE001 - another key, or not msgpack: the follower says what it is
                pass
            self._verified.add(collection)
            return True
        if collection not in self._unverified:
            self._unverified.add(collection)
            log.error("memory: the memory stream names a collection %r, but none of its first writes opens as one a "
                      "node made; it is not opened here (check who can reach the NATS servers: `persmem doctor`)",
                      collection[:80])
        return False

    def last_seq(self, collection: str) -> int:
        """The stream sequence of the collection's newest write (0: none)."""
        from nats.js.errors import NotFoundError

        async def _last():
            try:
                return (await self.link.js.get_last_msg(STREAM, subject(collection))).seq
            except NotFoundError:
                return 0

        return self._run(_last, "read the collection's last write")

    # -- writing ------------------------------------------------------------------------------------------
    def publish(self, collection: str, entries: list, expected: int) -> int:
        """Publish one write's entries; returns its stream sequence once a majority of the replicas stored it.
        Behind when another write reached the collection after `expected`. A publish that times out (a NATS
        server failing over) is sent again with the same message id, which JetStream stores at most once."""
        from nats.errors import Error as NatsError
        from nats.js.errors import APIError

        msg_id = secrets.token_hex(16)
        data = self.binding.seal(_encoder.encode(entries), subject(collection), msg_id, expected)
        if len(data) > MAX_MESSAGE:
            raise UserError(f"this write is {len(data):,} bytes, more than the cluster takes in one message "
                            f"({MAX_MESSAGE:,}); store fewer memories per call.")
        if time.monotonic() < self._refuse_until:  # the last write waited the whole timeout: do not hold the lock again
            raise ReplicationFailed(
                f"the NATS cluster did not confirm a write in the last {REFUSE_AFTER_TIMEOUT:g} s, so this one was not "
                "tried; nothing was stored. Try again shortly; `persmem cluster status` shows the cluster.")
        headers = {"Nats-Msg-Id": msg_id, BEFORE: str(expected)}
        deadline = time.monotonic() + self.timeout
        problem = ""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._refuse_until = time.monotonic() + REFUSE_AFTER_TIMEOUT
                raise ReplicationFailed(
                    f"the NATS cluster did not confirm this write within {self.timeout:g} s ({problem}); it was not "
                    "applied here. It may still be stored: check with memory_get or memory_search before writing "
                    "it again. `persmem cluster status` shows the cluster.")
            try:
                ack = self.link.run(self.link.js.publish(subject(collection), data, timeout=min(2.0, left),
                                                         headers=headers), timeout=min(2.0, left) + 1)
                return ack.seq
            except APIError as exc:
                if str(exc.description).startswith("wrong last sequence"):  # ": N" is not always given
                    said = str(exc.description).rsplit(":", 1)[-1].strip()
                    raise Behind(int(said) if said.isdigit() else self.last_seq(collection)) from None
                if exc.code in (503, 408) or exc.err_code in (10008, 10077):  # no quorum yet, leader moving
                    problem = f"{exc.description}"
                    time.sleep(0.1)
                    continue
                raise ReplicationFailed(f"the NATS cluster refused this write: {exc.description}; nothing was "
                                        "stored.") from None
            except (NatsError, TimeoutError) as exc:  # no answer, no stream leader yet, reconnecting: again
                problem = type(exc).__name__
                time.sleep(0.1)

    # -- following ----------------------------------------------------------------------------------------
    def follow(self, collection: str, after: int, apply: Callable[[list[tuple[int, list]]], None]) -> Follower:
        follower = Follower(self, collection, after, apply).start()
        self._followers.append(follower)
        return follower

    def watch_collections(self, opened: Callable[[str], None]) -> None:
        """Call `opened(name)` (in a worker thread) for every collection a write reaches from now on: a node learns
        of collections other nodes create. Headers only: the watcher reads no memory."""
        from nats.js.api import ConsumerConfig, DeliverPolicy

        link = self.link

        async def _seen(msg):
            name = msg.subject[len(SUBJECT_PREFIX):]
            if name not in self._known and msg.subject != MARKER:
                seq = msg.metadata.sequence.stream
                try:  # only a write a node made opens a collection here (not a name someone else published to)
                    full = await link.js.get_msg(STREAM, seq)
                    self.open_write(seq, full.data or b"", name, full.headers or {})
                except FrameRefused as exc:
                    log.error("memory: a write to %r was refused, so it opens no collection here: %s", name[:80], exc)
                    return
                except Exception as exc:  # noqa: BLE001 - another key, garbage, or the cluster not answering:
                    log.warning("memory: a write to %r at %d could not be checked (%s); the collection is opened "
                                "anyway, and its follower decides", name[:80], seq, exc)
                self._known.add(name)
                link.loop.run_in_executor(None, opened, name)

        async def _subscribe():
            return await link.js.subscribe(SUBJECT_PREFIX + ">", stream=STREAM, cb=_seen, ordered_consumer=True,
                                           headers_only=True, config=ConsumerConfig(deliver_policy=DeliverPolicy.NEW))

        self._watcher = self._run(_subscribe, "watch for new collections")

    def stop(self) -> None:
        if self._watcher is not None:
            try:
                self.link.run(self._watcher.unsubscribe(), timeout=2)
            except Exception:  # noqa: BLE001 - closing anyway
                pass
            self._watcher = None
        for follower in self._followers:
            follower.stop()
        self._followers.clear()

    def open_write(self, seq: int, data: bytes, collection: str, headers: dict) -> list:
        """The log entries of the stream message `seq` of `collection`, once it opens as a write made for that
        collection with the "before" its headers say (FrameRefused when it does not; KeyNotOnHand when it is
        sealed under a key this node lacks). Whether that "before" is right is the follower's to check."""
        before = headers.get(BEFORE, "")
        return _decoder.decode(self.binding.open(seq, data, subject(collection), headers.get("Nats-Msg-Id", ""),
                                                 int(before) if before.isdigit() else before))

    def previous_on_subject(self, collection: str, before: int, seq: int) -> bool:
        """Whether the write at `seq` directly follows the one at `before` on the collection's subject (nothing of
        that collection between them), asked of the stream."""
        from nats.js.errors import NotFoundError

        async def _next():
            try:
                return (await self.link.js.get_msg(STREAM, seq=before + 1, subject=subject(collection), next=True)).seq
            except NotFoundError:
                return 0

        return self._run(_next, "check a write's place") == seq

    # -- snapshots ----------------------------------------------------------------------------------------
    def snapshot_seq(self, collection: str) -> int:
        """The stream sequence the collection's newest snapshot reaches (0: there is none)."""
        from nats.js.errors import NotFoundError, ObjectNotFoundError

        async def _info():
            try:
                return await (await self.link.js.object_store(SNAPSHOTS)).get_info(collection)
            except (NotFoundError, ObjectNotFoundError):
                return None

        info = self._run(_info, "read the snapshot's sequence")
        return 0 if info is None else _applied_seq(info.headers)

    def publish_snapshot(self, collection: str, files: dict[str, tuple[object, int]], applied_seq: int, *,
                         newer_than: int) -> bool:
        """Put the collection's files (name -> (open binary file, bytes to copy)) in the object store as one tar,
        marked with the sequence they reach, unless another node put one after `newer_than` (this node's previous
        snapshot): then that one serves, and this node waits for its next turn. The tar is spooled through a
        temporary file, not memory. The files are closed. Returns whether it put."""
        from nats.js.api import ObjectMeta

        try:
            if self.snapshot_seq(collection) > newer_than:  # another node put one since this node's last
                return False
            with tempfile.TemporaryFile() as plain, tempfile.TemporaryFile() as spool:
                with tarfile.open(fileobj=plain, mode="w") as tar:
                    for name, (f, size) in files.items():
                        info = tarfile.TarInfo(name)
                        info.size = size
                        tar.addfile(info, f)
                plain.seek(0)  # sealed as a whole, for this collection and this sequence (plain without a key)
                self.sealer.seal_stream(plain, spool, bound_purpose(SNAPSHOT_KIND, collection, applied_seq))
                size = spool.tell()
                meta = ObjectMeta(name=collection, description=f"applied_seq {applied_seq}",
                                  headers={"Persmem-Applied-Seq": str(applied_seq)})

                async def _put():
                    spool.seek(0)
                    return await (await self.link.js.object_store(SNAPSHOTS)).put(collection, spool, meta=meta)

                self._run(_put, "publish a snapshot", timeout=max(60.0, self.timeout))
        finally:
            for f, _ in files.values():
                f.close()
        log.info("memory: snapshot of %s at sequence %d published (%d bytes)", collection, applied_seq, size)
        return True

    def restore_snapshot(self, collection: str, folder: Path) -> int:
        """Write the collection's newest snapshot into the empty `folder`; returns the sequence it reaches (0 and
        nothing written when there is none). Read through a temporary file; tried again if it changes meanwhile."""
        from nats.js.errors import NotFoundError, ObjectNotFoundError

        for attempt in range(3):
            with tempfile.TemporaryFile() as spool:
                async def _get():
                    spool.seek(0)
                    spool.truncate()
                    try:
                        return await (await self.link.js.object_store(SNAPSHOTS)).get(collection, writeinto=spool)
                    except (NotFoundError, ObjectNotFoundError):
                        return None

                try:
                    got = self._run(_get, "read a snapshot", timeout=max(60.0, self.timeout))
                except Exception as exc:  # noqa: BLE001 - another node replacing it: read the new one
                    if attempt == 2:
                        raise
                    log.warning("memory: reading the snapshot of %s failed (%s); trying again", collection, exc)
                    continue
                if got is None or not spool.tell():
                    return 0
                applied_seq = _applied_seq(got.info.headers)
                spool.seek(0)
                plain = self._open_snapshot(collection, spool, applied_seq)
                if plain is None:
                    return 0
                folder.mkdir(parents=True, exist_ok=True)
                with plain, tarfile.open(fileobj=plain, mode="r") as tar:
                    for member in tar.getmembers():
                        if member.name not in SNAPSHOT_FILES or not member.isfile():
                            raise UserError(f"the snapshot of {collection!r} holds {member.name!r}, which is not a "
                                            "collection file; nothing was written from it. Remove the snapshot (nats "
                                            f"object rm {SNAPSHOTS} {collection}) and restart.")
                        with open(folder / member.name, "wb") as out:
                            shutil.copyfileobj(tar.extractfile(member), out, 1 << 20)
                            out.flush()
                            os.fsync(out.fileno())
                return applied_seq
        return 0

    def _open_snapshot(self, collection: str, spool, applied_seq: int):
        """The snapshot's tar (a temporary file, at its start) once it opens as this collection's at `applied_seq`;
        None (logged) when it does not: the collection then starts from the stream's first write instead."""
        plain = tempfile.TemporaryFile()
        head = spool.read(4)
        spool.seek(0)
        if self.sealer.enabled and not is_sealed(head):
            log.warning("memory: the snapshot of %s is not sealed (an earlier persmem's, or not a node's): not used; "
                        "the collection is built from the memory stream instead", collection)
            plain.close()
            return None
        try:
            self.sealer.open_stream(spool, plain, bound_purpose(SNAPSHOT_KIND, collection, applied_seq))
        except SealingError as exc:
            log.error("memory: the snapshot of %s does not open as this collection's at sequence %d (%s): not used; "
                      "the collection is built from the memory stream instead", collection, applied_seq, exc)
            plain.close()
            return None
        plain.seek(0)
        return plain

    def _run(self, make, what: str, timeout: float | None = None):
        """Run the coroutine `make()` makes on the link's loop. Reads and creations that may be asked again: a
        timeout or "no leader yet" (a NATS server failing over) is retried for up to three times `timeout`."""
        from nats.errors import NoRespondersError
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.errors import NoStreamResponseError, ServiceUnavailableError

        timeout = timeout or self.timeout
        deadline = time.monotonic() + 3 * timeout
        while True:
            try:
                return self.link.run(make(), timeout=timeout)
            except (TimeoutError, NatsTimeout, NoRespondersError, NoStreamResponseError,
                    ServiceUnavailableError) as exc:
                if time.monotonic() + 0.25 >= deadline:
                    raise ReplicationFailed(f"the NATS cluster did not answer ({type(exc).__name__}) within "
                                            f"{3 * timeout:g} s when asked to {what}; `persmem cluster status` shows "
                                            "its state.") from None
                time.sleep(0.25)


class Follower:
    """Applies one collection's stream, in order, from `after + 1`: an ordered consumer puts messages in a queue,
    a thread hands them to `apply` in batches."""

    def __init__(self, replication: Replication, collection: str, after: int,
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


def _applied_seq(headers) -> int:
    """The Persmem-Applied-Seq header of a snapshot (nats-py gives header values as strings or lists)."""
    value = (headers or {}).get("Persmem-Applied-Seq", "0")
    value = value[0] if isinstance(value, list) else value
    return int(value) if str(value).isdigit() else 0

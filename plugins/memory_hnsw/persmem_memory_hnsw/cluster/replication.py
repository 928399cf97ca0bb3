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

This module is `Replication`: making and describing the stream, publishing writes, following collections and
checking a write's place. The stream's names are in stream_names.py, the `Follower` in follower.py, snapshots in
snapshots.py (mixed into Replication).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable

import msgspec

from persmem_core.sdk import (
    FrameRefused,
    Sealer,
    StreamBinding,
    UserError,
    stream_problems,
)

from ..store.log import WriteFailed
from ..store.records import Entry
from .follower import Follower
from .snapshots import SNAPSHOTS, ReplicationSnapshots
from .stream_names import BEFORE, MARKER, PURPOSE, STREAM, SUBJECT_PREFIX, WRITE_KIND, subject

log = logging.getLogger("persmem.memory")

MAX_MESSAGE = 8 << 20  # a bulk store of 1,000 memories with their text fits; the stream refuses larger
REFUSE_AFTER_TIMEOUT = 5.0  # seconds writes are refused at once after one waited the whole timeout (no quorum):
# a write waits for the cluster under its collection's write lock, which holds that node's searches of it too

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


class Replication(ReplicationSnapshots):
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


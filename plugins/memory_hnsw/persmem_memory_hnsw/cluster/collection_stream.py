"""One collection on a cluster: following the memory stream, waiting for it, and publishing snapshots.

Every write of a replicated collection is published to the memory stream first (cluster/replication.py) and
applied by every node in stream order, this one included; `replicated` makes a write again when another node's
write came first. A node publishes its files as a snapshot now and then, for new nodes to start from.
`c` is the Collection; writing/from_stream.py logs what the stream brings.
"""

from __future__ import annotations

import functools
import logging
import threading
import time

from persmem_core.sdk import UserError

from ..store.checkpoint import checkpoint_path
from ..store.checkpoint import meta_path as checkpoint_meta
from ..store.log import LOG_NAME
from ..store.replay import INDEX_NAME, MODEL_RECORD
from ..store.vectors import meta_path as index_meta
from .replication import Behind, ReplicationFailed

log = logging.getLogger("persmem.memory")

MAX_WRITE_TRIES = 20  # a write another node's writes keep overtaking (replication.Behind) is made again this often


def replicated(write):
    """A write of a replicated collection is made again after applying what another node wrote first (the
    stream refused it: replication.Behind), so it is decided against the state every node has. Alone: as is.
    The first argument of `write` is the collection."""
    @functools.wraps(write)
    def again(c, *args, **kwargs):
        for _ in range(MAX_WRITE_TRIES):
            try:
                return write(c, *args, **kwargs)
            except Behind as behind:
                c.stream.wait_applied(behind.last_seq)
        raise UserError(f"collection {c.name!r} is being written on other nodes faster than this write could "
                        "follow; nothing was changed. Try again.")
    return again


class CollectionStream:
    """The collection `c`'s side of the memory stream. Alone (no replication) it only counts nothing."""

    def __init__(self, c, replication):
        self.c, self.replication = c, replication
        self.follower = None  # on a cluster: the stream follower (replication.Follower), from `follow`
        self._applied = threading.Condition()  # notified when Rows.applied_seq moves
        self._snapshot_seq = 0  # the sequence of the last snapshot this node published
        self.since_snapshot = 0  # log entries from the stream (made here or applied) since then
        self._snapshotting = threading.Lock()  # held while a snapshot uploads: one at a time
        self.reapply = 0  # the sequence `follow` applies once more (the last one logged here)

    def follow(self) -> None:
        """Follow the memory stream from the last write applied here, and return once everything the stream held
        when this was called is applied (a node that was down catches up before it answers)."""
        c = self.c
        target = self.replication.last_seq(c.name)
        if c.rows.applied_seq > target:
            raise UserError(f"collection {c.name!r} on this node has writes up to stream sequence "
                            f"{c.rows.applied_seq}, but the cluster's memory stream ends at {target}: it is another "
                            "(or a reset) cluster. Move this node's collection folder aside to start it from the "
                            "cluster, or point [cluster] servers at the cluster it came from.")
        # From the last write applied here, again: a crash may have logged only some of its entries (each carries
        # the write's sequence), and a write's entries are full states, so applying it twice changes nothing.
        self.reapply = c.rows.applied_seq
        self.follower = self.replication.follow(c.name, max(0, c.rows.applied_seq - 1), c.apply_replicated)
        self.wait_applied(target, timeout=None, reapplied=True)

    def stop(self) -> None:
        if self.follower is not None:
            self.follower.stop()

    def wait_applied(self, seq: int, timeout: float | None = 30.0, reapplied: bool = False) -> None:
        """Return once the stream's writes up to `seq` are applied here (with `reapplied`, also the one `follow`
        applies again). UserError after `timeout` seconds, or at once when this node stopped following the
        collection (its follower failed: the log says why)."""
        c = self.c
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._applied:
            while not ((c.rows.applied_seq >= seq and not (reapplied and self.reapply)) or c.closed):
                if self.follower is not None and self.follower.failed is not None:
                    raise ReplicationFailed(f"collection {c.name!r} stopped following the cluster on this node "
                                            "(the server log says why); nothing was changed. Restart this node.")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._applied.wait(1.0 if left is None else min(1.0, left))
            if (c.rows.applied_seq < seq or (reapplied and self.reapply)) and not c.closed:
                raise ReplicationFailed(f"collection {c.name!r} on this node is {seq - c.rows.applied_seq} writes "
                                        f"behind the cluster and did not catch up within {timeout:g} s; nothing was "
                                        "changed. Try again (`persmem cluster status` shows the cluster).")

    def applied_to(self, seq: int) -> None:
        with self._applied:
            self.c.rows.applied_seq = max(self.c.rows.applied_seq, seq)
            self._applied.notify_all()

    def snapshot_due(self) -> bool:
        """Enough written since the last snapshot to publish another (at an index save)."""
        c = self.c
        return (self.replication is not None and not self._snapshotting.locked()
                and self.since_snapshot >= max(c.config.snapshot_every, len(c.memories)))

    def publish_snapshot(self) -> None:
        """Hand this node's files as they are now (write lock held, just saved) to the object store, for new nodes
        to start from (replication.restore_snapshot); the upload runs in a thread of its own."""
        c = self.c
        paths = {LOG_NAME: (c.folder / LOG_NAME, c.log.size)}
        for path in (c.folder / INDEX_NAME, index_meta(c.folder / INDEX_NAME), checkpoint_path(c.folder),
                     checkpoint_meta(checkpoint_path(c.folder)), c.folder / MODEL_RECORD):
            if path.exists():
                paths[path.name] = (path, path.stat().st_size)
        files = {name: (open(path, "rb"), size) for name, (path, size) in paths.items()}
        previous, self._snapshot_seq = self._snapshot_seq, c.rows.applied_seq
        seq, self.since_snapshot = self._snapshot_seq, 0
        self._snapshotting.acquire()

        def upload():
            try:
                self.replication.publish_snapshot(c.name, files, seq, newer_than=previous)
            except Exception:  # noqa: BLE001 - optional: a new node then replays more of the stream
                log.exception("collection %s: publishing a snapshot failed", c.name)
            finally:
                self._snapshotting.release()

        threading.Thread(target=upload, name=f"memory-snapshot-{c.name}", daemon=True).start()

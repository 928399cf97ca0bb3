"""Replicated collections (replication.py) on a real three-node NATS JetStream cluster, two nodes in this process
(each with its own connection, folder and embedder thread): what the end-to-end tests (tests/test_scale_out.py)
cannot reach from outside: a write torn by a crash on a follower, a message no persmem node wrote, a node with
another key, and compare-and-set between two writers."""

from __future__ import annotations

import threading

import msgspec
import pytest

from persmem_core.nats_link import NatsLink
from persmem_core.sealing import Sealer
from persmem_core.settings import ClusterConfig
from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedder import OnnxEmbedder, default_model_files
from persmem_memory_hnsw.embedding import BackgroundEmbedder
from persmem_memory_hnsw.log import LOG_NAME, read_frames
from persmem_memory_hnsw.replication import Replication, subject

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def embedder():
    return OnnxEmbedder(default_model_files()).load()


class Node:
    """One persmem node's memory, in this process: its own NATS connection, folder and background embedder."""

    def __init__(self, root, urls, embedder, name, sealer=None):
        self.root, self.urls, self.embedder, self.name = root, urls, embedder, name
        self.sealer = sealer or Sealer.plain()
        self.col = None

    def open(self, embed: bool = True) -> Collection:
        """Open and follow the stream; without `embed`, memories waiting for vectors stay waiting."""
        self.link = NatsLink(ClusterConfig(servers=self.urls, node=self.name)).connect()
        self.replication = Replication(self.link, self.sealer, replicas=3, timeout=10)
        self.replication.ensure_stream()
        self.embedding = BackgroundEmbedder()
        if embed:
            self.embedding.start()
        col = Collection("memories", self.root / self.name, self.embedder, MemoryConfig(), self.sealer,
                         self.embedding, self.replication).open()
        try:
            col.follow()
        except BaseException:
            col.close()
            self.embedding.stop(drain=False)
            self.replication.stop()
            self.link.close()
            raise
        self.col = col
        return col

    def close(self) -> None:
        if self.col is not None:
            self.embedding.stop(drain=False)
            self.col.close()
            self.replication.stop()
            self.link.close()
            self.col = None


@pytest.fixture
def nodes(tmp_path, nats_cluster, embedder):
    made: list[Node] = []

    def make(name: str, sealer=None) -> Node:
        made.append(Node(tmp_path, nats_cluster.urls, embedder, name, sealer))
        return made[-1]

    yield make
    for node in made:
        node.close()


def ids(col: Collection) -> set[str]:
    """The collection's memory ids, read as a tool reads them (under its read lock: a write applied meanwhile is
    seen whole or not at all)."""
    with col.lock.gen_rlock():
        return set(col.memories)


def note(text: str) -> NewMemory:
    return NewMemory(content=text, project="p", type="note", tags=[])


def test_a_write_torn_by_a_crash_on_a_follower_is_applied_whole_when_it_comes_back(nodes):
    a, b = nodes("a").open(), nodes("b")
    b.open()
    stored = a.store([note("The blue door code is 4471."), note("Parking is behind the bakery."),
                      note("The wifi password is on the fridge.")], author="kite")
    stored_ids = [r["id"] for r in stored]
    assert a.wait_embedded(30)  # the last write: one message with the three memories' vectors
    last = a.rows.applied_seq
    b.col.wait_applied(last)
    assert set(stored_ids) <= ids(b.col) and not b.col.rows.unembedded
    b.close()
    # a crash while b logged that last write: only its first entry reached the disk
    log_path = b.root / "b" / LOG_NAME
    frames = [(start, entry) for start, _, entry in read_frames(log_path.read_bytes(), None, log_path)]
    ours = [start for start, entry in frames if entry.seq == last]
    assert len(ours) == 3
    with open(log_path, "r+b") as f:
        f.truncate(ours[1])
    for name in ("checkpoint.bin", "checkpoint.bin.meta.json", "vectors.hnsw", "vectors.hnsw.meta.json"):
        (b.root / "b" / name).unlink(missing_ok=True)  # as if they were saved before that write
    col = b.open(embed=False)  # b embeds nothing itself: what it has comes from the stream
    assert set(stored_ids) <= ids(col)
    assert not col.rows.unembedded  # the torn write was applied again, whole: every memory has its vectors
    assert col.rows.applied_seq == last


def test_a_message_no_persmem_node_wrote_is_passed_over_and_writes_go_on(nodes):
    a = nodes("a").open()
    link = nodes("x")
    link.link = NatsLink(ClusterConfig(servers=link.urls)).connect()
    link.link.run(link.link.js.publish(subject("memories"), b"\x00 not a persmem write"))
    b = nodes("b").open()  # follows past it instead of waiting for it forever
    stored = a.store([note("The staging database listens on port 6543.")], author="kite")
    b.wait_applied(a.rows.applied_seq, timeout=10)
    assert stored[0]["id"] in ids(b)
    link.link.close()


def test_a_node_with_another_key_stops_following_and_says_so(nodes, tmp_path):
    key_a, key_b = (Sealer({k: bytes([i]) * 32}, k, True) for i, k in ((1, "aa" * 8), (2, "bb" * 8)))
    a = nodes("a", key_a).open()
    a.store([note("Sealed with the first key.")], author="kite")
    b = nodes("b", key_b)
    with pytest.raises(Exception, match="stopped following"):
        b.open()


def test_two_writers_on_two_nodes_end_in_the_same_state(nodes):
    a, b = nodes("a").open(), nodes("b").open()
    first = a.store([note("The release train leaves on Thursdays.")], author="kite")[0]["id"]
    b.wait_applied(a.rows.applied_seq)

    def updates(col: Collection, who: str) -> None:
        for i in range(10):
            col.update(first, editor="kite", editors={}, content=f"The release train leaves on day {i} ({who}).")

    threads = [threading.Thread(target=updates, args=(a, "a")), threading.Thread(target=updates, args=(b, "b"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    b.wait_applied(a.rows.applied_seq)
    a.wait_applied(b.rows.applied_seq)
    on_a, on_b = a.get(first), b.get(first)
    assert on_a.version == on_b.version == 21  # every update is a version, in one order on both nodes
    assert msgspec.structs.replace(on_a, labels=[]) == msgspec.structs.replace(on_b, labels=[])


"""Replicated collections (replication.py) on a real three-node NATS JetStream cluster, two nodes in this process
(each with its own connection, folder and embedder thread): what the end-to-end tests (tests/test_scale_out.py)
cannot reach from outside: a write torn by a crash on a follower, a message no persmem node wrote, a node with
another key, and compare-and-set between two writers. The cluster is closed (an nkey per node, as `persmem
cluster up` makes it), and a client with a node's NATS credentials but not the key tries what issue 32 did: a
private collection's sealed write copied onto a shared collection's subject, an earlier write replayed, an
unsealed write, another collection's snapshot; every node refuses each alike and writes go on. Writes an earlier
persmem stored (before the stream's binding marker) still apply; the same kind after it does not."""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading

import msgspec
import nats
import pytest

from persmem_core.sdk.testing import ClusterConfig, NatsCluster, publish_until_acked
from persmem_core.sdk import NatsLink, Sealer
from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files
from persmem_memory_hnsw.embedding.background import BackgroundEmbedder
from persmem_memory_hnsw.store.log import LOG_NAME, read_frames
from persmem_memory_hnsw.cluster.replication import Replication
from persmem_memory_hnsw.cluster.stream_names import STREAM, subject

pytestmark = pytest.mark.timeout(300)
KEY = Sealer({"cc" * 8: bytes([3]) * 32}, "cc" * 8, True)  # the key every node of the cluster shares


@pytest.fixture
def nats_cluster(tmp_path):
    """A closed three-node cluster: only clients with an nkey get in (node1, node2, and the attacker's node3)."""
    cluster = NatsCluster(tmp_path / "nats", size=3, auth=True)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def embedder():
    return OnnxEmbedder(default_model_files()).load()


class Node:
    """One persmem node's memory, in this process: its own NATS connection, folder and background embedder."""

    def __init__(self, root, cluster, embedder, name, sealer=None, collection="memories"):
        self.root, self.cluster, self.embedder, self.name = root, cluster, embedder, name
        self.sealer = sealer or Sealer.plain()
        self.collection = collection
        self.col = None

    def open(self, embed: bool = True) -> Collection:
        """Open and follow the stream; without `embed`, memories waiting for vectors stay waiting."""
        self.link = NatsLink(ClusterConfig(**self.cluster.client_settings("node1"), node=self.name)).connect()
        self.replication = Replication(self.link, self.sealer, replicas=3, timeout=10)
        self.replication.ensure_stream()
        self.embedding = BackgroundEmbedder()
        if embed:
            self.embedding.start()
        col = Collection(self.collection, self.root / f"{self.name}-{self.collection}", self.embedder, MemoryConfig(),
                         self.sealer, self.embedding, self.replication).open()
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

    def make(name: str, sealer=None, collection="memories") -> Node:
        made.append(Node(tmp_path, nats_cluster, embedder, name, sealer, collection))
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
    log_path = b.root / "b-memories" / LOG_NAME
    frames = [(start, entry) for start, _, entry in read_frames(log_path.read_bytes(), None, log_path)]
    ours = [start for start, entry in frames if entry.seq == last]
    assert len(ours) == 3
    with open(log_path, "r+b") as f:
        f.truncate(ours[1])
    for name in ("checkpoint.bin", "checkpoint.bin.meta.json", "vectors.hnsw", "vectors.hnsw.meta.json"):
        (b.root / "b-memories" / name).unlink(missing_ok=True)  # as if they were saved before that write
    col = b.open(embed=False)  # b embeds nothing itself: what it has comes from the stream
    assert set(stored_ids) <= ids(col)
    assert not col.rows.unembedded  # the torn write was applied again, whole: every memory has its vectors
    assert col.rows.applied_seq == last


def test_a_message_no_persmem_node_wrote_is_passed_over_and_writes_go_on(nodes, nats_cluster):
    a = nodes("a").open()
    link = NatsLink(ClusterConfig(**nats_cluster.client_settings("node3"))).connect()
    link.run(link.js.publish(subject("memories"), b"\x00 not a persmem write"))
    b = nodes("b").open()  # follows past it instead of waiting for it forever
    stored = a.store([note("The staging database listens on port 6543.")], author="kite")
    b.wait_applied(a.rows.applied_seq, timeout=10)
    assert stored[0]["id"] in ids(b)
    link.close()


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



# -- issue 32: a client that reaches NATS, with a node's credentials but without the key ------------------------------

class Intruder:
    """A NATS client with node3's credentials (or none) and no key: reads stream messages and publishes copies."""

    def __init__(self, cluster, client="node3"):
        self.options = cluster.connect_options(client)

    def run(self, work):
        async def session():
            nc = await nats.connect(**self.options, connect_timeout=3, allow_reconnect=False,
                                    max_reconnect_attempts=0, error_cb=_quiet)
            try:
                return await work(nc.jetstream(timeout=5))
            finally:
                await nc.close()

        return asyncio.run(session())

    def copy(self, seq: int, to: str, **change_headers) -> int:
        """Publish message `seq` of the memory stream again, onto collection `to`'s subject, with its headers
        (as changed) and the "before" JetStream wants now (else JetStream would not take it); its new sequence."""
        async def work(js):
            msg = await js.get_msg(STREAM, seq)
            headers = {k: v for k, v in (msg.headers or {}).items() if not k.startswith("Nats-") or k == "Nats-Msg-Id"}
            headers.update(change_headers)
            try:
                last = (await js.get_last_msg(STREAM, subject(to))).seq
            except nats.js.errors.NotFoundError:
                last = 0
            headers["Nats-Expected-Last-Subject-Sequence"] = str(last)
            headers["Nats-Msg-Id"] = secrets.token_hex(16)  # not held by the duplicate window
            return (await publish_until_acked(js, subject(to), msg.data, headers)).seq

        return self.run(work)

    def publish(self, to: str, data: bytes) -> int:
        async def work(js):
            return (await publish_until_acked(js, subject(to), data)).seq

        return self.run(work)


async def _quiet(exc):  # nats-py prints connection errors by default
    pass


def test_a_client_without_credentials_cannot_connect_to_read_the_memory_stream(nats_cluster):
    with pytest.raises(Exception, match="Authorization Violation"):
        Intruder(nats_cluster, client=None).run(lambda js: js.stream_info(STREAM))


def test_writes_moved_to_another_collection_replayed_or_unsealed_are_refused_on_every_node(nodes, nats_cluster,
                                                                                         caplog):
    caplog.set_level(logging.ERROR, logger="persmem.memory")
    intruder = Intruder(nats_cluster)
    private = nodes("a", KEY, collection="sessions").open(embed=False)  # wren's session turns: a private collection
    shared_a, shared_b = nodes("a", KEY).open(embed=False), nodes("b", KEY).open(embed=False)
    turn = private.store([note("wren's private session: the merger closes on March 3.")], author="wren")[0]["id"]
    turn_write = private.rows.applied_seq
    shared = shared_a.store([note("The release train leaves on Thursdays.")], author="kite")[0]["id"]
    first_version = shared_a.rows.applied_seq
    shared_a.update(shared, editor="kite", editors={}, content="The release train leaves on Fridays.")
    shared_b.wait_applied(shared_a.rows.applied_seq)

    moved = intruder.copy(turn_write, "memories")  # the private turn onto the shared collection's subject
    replayed = intruder.copy(first_version, "memories")  # the memory's first version again: a rollback
    sealed = intruder.run(lambda js: js.get_msg(STREAM, first_version)).data
    plain = KEY.open(sealed, bound_purpose_of(intruder, first_version))  # what the write says, for the next try:
    unsealed = intruder.publish("memories", plain)  # the same write in plaintext (a client without the key)

    # writes go on past them, on both nodes, and neither node applied any of them
    after = shared_b.store([note("Parking is behind the bakery.")], author="kite")[0]["id"]
    shared_a.wait_applied(shared_b.rows.applied_seq)
    assert shared_b.rows.applied_seq > unsealed > replayed > moved
    for col in (shared_a, shared_b):
        assert ids(col) == {shared, after}  # not wren's turn
        assert col.get(shared).content == "The release train leaves on Fridays." and col.get(shared).version == 2
    assert turn in ids(private)
    intruder.publish("made-up", plain)  # a collection nobody made: not listed, so no node opens it
    assert "made-up" not in shared_b.replication.collections() and "memories" in shared_b.replication.collections()
    assert caplog.text.count("was refused") == 6, caplog.text  # three writes, each on both nodes
    assert caplog.text.count("does not open as sealed for that place") == 4 and "is not sealed" in caplog.text


def bound_purpose_of(intruder, seq):
    """What the write at `seq` of the memory stream was sealed for (its subject, message id and "before"): what
    only a node, holding the key, can open it with."""
    from persmem_core.sdk import bound_purpose
    from persmem_memory_hnsw.cluster.stream_names import BEFORE, WRITE_KIND

    msg = intruder.run(lambda js: js.get_msg(STREAM, seq))
    return bound_purpose(WRITE_KIND, msg.subject, msg.headers["Nats-Msg-Id"], int(msg.headers[BEFORE]))


def test_a_snapshot_put_under_another_collection_is_not_used(nodes, nats_cluster, tmp_path):
    private = nodes("a", KEY, collection="sessions").open(embed=False)
    private.store([note("wren's private session: the merger closes on March 3.")], author="wren")
    replication = private.replication
    files = {name: (open(private.folder / name, "rb"), (private.folder / name).stat().st_size)
             for name in ("records.log",)}
    assert replication.publish_snapshot("sessions", files, private.rows.applied_seq, newer_than=0)

    async def copy(js):  # the private collection's snapshot, put again as the shared one's (headers and all)
        store = await js.object_store("persmem_memory_snapshots")
        got = await store.get("sessions")
        from nats.js.api import ObjectMeta

        await store.put("memories", got.data, meta=ObjectMeta(name="memories", headers=got.info.headers))

    Intruder(nats_cluster).run(copy)
    assert replication.restore_snapshot("memories", tmp_path / "fresh") == 0  # not used: replayed from the stream
    assert not (tmp_path / "fresh" / "records.log").exists()
    assert replication.restore_snapshot("sessions", tmp_path / "own") == private.rows.applied_seq
    assert (tmp_path / "own" / "records.log").exists()


def test_writes_an_earlier_persmem_stored_still_apply_and_the_same_kind_after_the_marker_is_refused(
        nodes, nats_cluster, embedder, tmp_path, caplog):
    """A cluster upgraded in place: writes stored before binding (sealed as `memory.replica`, bound to nothing) are
    applied as before; the first node of this version publishes the marker, and the same kind of write after it
    is refused."""
    from persmem_memory_hnsw.cluster.stream_names import PURPOSE

    caplog.set_level(logging.ERROR, logger="persmem.memory")
    alone = Collection("memories", tmp_path / "alone", embedder, MemoryConfig(), KEY).open()  # what an old node wrote
    alone.store([note("The old cluster's memory: backups run at 02:00.")], author="kite")
    log_path = tmp_path / "alone" / LOG_NAME
    [old_entry] = [entry for _, _, entry in read_frames(log_path.read_bytes(), KEY, log_path)]
    alone.close()
    legacy = KEY.seal(msgspec.msgpack.encode([old_entry]), PURPOSE)
    intruder = Intruder(nats_cluster, client="node1")
    setup = nodes("setup", KEY)
    setup.open(embed=False)  # the stream exists (and this version's marker: purged below)
    setup.close()

    async def as_before(js):  # the stream as an earlier persmem left it: one write, no marker
        await js.purge_stream(STREAM)
        return (await js.publish(subject("memories"), legacy, headers={
            "Nats-Msg-Id": secrets.token_hex(16), "Nats-Expected-Last-Subject-Sequence": "0"})).seq

    Intruder(nats_cluster, client="admin").run(as_before)
    a = nodes("a", KEY).open(embed=False)  # publishes the marker after the old write
    assert old_entry.memory.id in ids(a)
    again = intruder.publish("memories", legacy)  # the same kind of frame now: refused
    b = nodes("b", KEY).open(embed=False)
    b.wait_applied(again, timeout=10)
    assert ids(b) == {old_entry.memory.id} and "was refused" in caplog.text

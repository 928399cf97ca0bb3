"""Scale-out, for real: a three-node NATS JetStream cluster on loopback, persmem server processes on it (each
with its own home, sharing the agents and the key), talked to through the real MCP client, directly and
through a real round-robin haproxy. Memory stored on one node is found on the other within the bound; a NATS
node or a persmem node killed with SIGKILL in the middle of a write loop loses no acknowledged memory; a node
that was down catches up; a fresh node starts from a snapshot and the stream after it (docs/scale-out.md)."""

from __future__ import annotations

import copy
import random
import re
import subprocess
import threading
import time

import pytest

from persmem_core.cluster.round_robin import RoundRobinProxy
from persmem_core.transport.server_process import RunningServer, persmem_command
from persmem_core.transport.tool_answers import ToolCallError

pytestmark = pytest.mark.timeout(600)

FOUND_WITHIN = 3.0  # seconds: the bound a write on one node is searchable on the others in (measured: tens of ms)

VOCABULARY = ("amber basil cedar delta ember falcon garnet harbor indigo juniper kestrel lantern meadow nickel orchid "
              "pepper quartz raven saffron timber umber velvet willow xenon yarrow zephyr anchor beacon cobalt dune "
              "eagle fjord glacier hollow island jasper kernel lagoon marble nectar onyx prairie quill ridge summit "
              "thistle upland valley walnut yonder zinc").split()


def fact(tag: str, i: int) -> str:
    """A sentence of its own (no near duplicate of another one: dedup would answer "duplicate")."""
    words = random.Random(f"{tag}{i}").sample(VOCABULARY, 8)
    return f"{tag} {i}: the {words[0]} {words[1]} service keeps {words[2]} {words[3]} near {words[4]} {words[5]} " \
           f"for {words[6]} {words[7]}."


def through(proxy: RoundRobinProxy, node: RunningServer) -> RunningServer:
    """A client of the nodes that connects to the proxy (with the nodes' agents)."""
    client = copy.copy(node)
    client.base_url, client.url = proxy.url, f"{proxy.url}/mcp"
    return client


def store(server: RunningServer, content: str, **extra) -> str:
    result = server.call_tool("memory_store", {"content": content, "project": "ops", **extra}, agent="kite")
    assert result["status"] == "stored", result
    return result["id"]


def search_ids(server: RunningServer, query: str, **extra) -> list[str]:
    found = server.call_tool("memory_search", {"query": query, "project": "ops", **extra}, agent="kite")
    return [hit["id"] for hit in found["results"]]


def count(server: RunningServer) -> int:
    return server.call_tool("memory_stats", {}, agent="kite")["count"]


def until(check, timeout: float, step: float = 0.02):
    """`check()` once it is truthy; AssertionError naming the timeout if it never is."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, f"not within {timeout} s"
            return value
        time.sleep(step)


def test_a_memory_stored_on_one_node_is_found_on_the_other_within_the_bound(cluster_nodes):
    group = cluster_nodes()
    a, b = group.start(), group.start()
    assert count(b) == 0
    memory_id = store(a, "The deploy key of the staging cluster rotates every 90 days.")
    started = time.monotonic()
    until(lambda: memory_id in search_ids(b, "how often does the staging deploy key rotate", mode="dense"),
          FOUND_WITHIN)
    took = time.monotonic() - started
    assert took < FOUND_WITHIN
    # and the other way round, with an update and a delete
    b.call_tool("memory_update", {"memory_id": memory_id, "content": "The staging deploy key rotates every 30 days."},
                agent="kite")
    until(lambda: "30 days" in a.call_tool("memory_get", {"memory_id": memory_id}, agent="kite")["content"],
          FOUND_WITHIN)
    a.call_tool("memory_delete", {"memory_id": memory_id}, agent="kite")
    until(lambda: memory_id not in search_ids(b, "staging deploy key rotation"), FOUND_WITHIN)
    # a collection created on one node appears on the other
    a.call_tool("memory_store", {"content": "Runbooks live in the ops wiki.", "collection": "runbooks"}, agent="kite")
    until(lambda: "runbooks" in [c["name"] for c in b.call_tool("memory_list_collections", {},
                                                                 agent="kite")["collections"]], FOUND_WITHIN)
    # the operator's view: doctor checks the memory stream, cluster status shows it
    doctor = subprocess.run(persmem_command("doctor"), env=b.env, capture_output=True, text=True, timeout=120)
    assert re.search(r"PASS\s+memory replication: stream PERSMEM_MEMORY: \d+ write\(s\) to 2 collection\(s\), "
                     r"replicas 3, leader n\d", doctor.stdout), doctor.stdout
    status = subprocess.run(persmem_command("cluster", "status"), env=b.env, capture_output=True, text=True,
                            timeout=120)
    assert status.returncode == 0 and "PERSMEM_MEMORY" in status.stdout and "PERSMEM_AMQ" in status.stdout, status


def test_writes_on_both_nodes_at_once_end_the_same_on_both(cluster_nodes):
    """Two writers, one per node, at the same time: the stream orders them (compare-and-set on the collection),
    and both nodes end with every acknowledged memory and the same versions."""
    group = cluster_nodes()
    a, b = group.start(), group.start()
    acked: dict[str, list[str]] = {"a": [], "b": []}

    def writer(server: RunningServer, name: str) -> None:
        for i in range(25):
            acked[name].append(store(server, fact(f"node {name}", i)))

    threads = [threading.Thread(target=writer, args=(a, "a")), threading.Thread(target=writer, args=(b, "b"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = acked["a"] + acked["b"]
    assert len(set(every)) == 50
    until(lambda: count(a) == count(b) == 50, FOUND_WITHIN)
    for memory_id in every:
        on_a, on_b = (server.call_tool("memory_get", {"memory_id": memory_id}, agent="kite") for server in (a, b))
        assert (on_a["content"], on_a["version"]) == (on_b["content"], on_b["version"])


def test_kill_9_of_a_nats_server_during_a_store_loop_loses_no_acknowledged_memory(cluster_nodes, nats_cluster):
    group = cluster_nodes()
    a, b = group.start(), group.start()
    acked, failed, stop = [], [], threading.Event()

    def writer(server: RunningServer, tag: str) -> None:
        i = 0
        while not stop.is_set():
            try:
                acked.append(store(server, fact(tag, i)))
            except ToolCallError as exc:  # allowed: a clear failure, never a lost acknowledged write
                failed.append(str(exc))
            i += 1

    threads = [threading.Thread(target=writer, args=(a, "alpha")), threading.Thread(target=writer, args=(b, "beta"))]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    nats_cluster.kill(0)
    time.sleep(3.0)
    nats_cluster.restart(0)
    time.sleep(1.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert len(acked) > 20, (len(acked), failed[:3])
    for problem in failed:
        assert "did not confirm" in problem or "behind" in problem or "cluster" in problem, problem
    until(lambda: count(a) == count(b) == len(acked), 30.0, step=0.2)
    for server in (a, b):
        for memory_id in acked[:: max(1, len(acked) // 40)]:
            server.call_tool("memory_get", {"memory_id": memory_id}, agent="kite")


def test_kill_9_of_a_persmem_node_the_other_serves_and_the_restarted_one_catches_up(cluster_nodes):
    group = cluster_nodes()
    a, b = group.start(), group.start()
    before = [store(a, fact("before the crash", i)) for i in range(5)]
    a.kill()
    during = [store(b, fact("while node 1 was down", i)) for i in range(19)]
    during.append(store(b, "While node 1 was down the nightly cache began to expire after nine hours."))
    assert count(b) == 25
    a.start()  # same home, same port: replays its log, then follows the stream from where it stopped
    assert count(a) == 25
    for memory_id in before + during:
        a.call_tool("memory_get", {"memory_id": memory_id}, agent="kite")
    assert during[-1] in search_ids(a, "when does the nightly cache expire", mode="dense")


def test_a_fresh_node_starts_from_a_snapshot_and_the_stream_after_it(cluster_nodes):
    group = cluster_nodes({"memory": {"save_index_every": 20, "snapshot_every": 20}})  # sequences: one per write
    a = group.start()
    single = a.call_tools([("memory_store", {"content": fact("shelf", i), "project": "ops"}) for i in range(25)],
                          agent="kite")
    chunks = [{"content": f"inventory item {i}: rack {i % 12}, slot {i}, serial SN{i:05d}"} for i in range(120)]
    assert a.call_tool("memory_bulk_store", {"chunks": chunks, "project": "ops", "context_chars": 0},
                       agent="kite")["stored"] == 120
    after = store(a, "Written after the snapshot: the spare disks are in rack 3.")
    c = group.start()  # an empty home
    assert count(c) == 146
    assert re.search(r"collection memories: started from the cluster's snapshot at stream sequence \d+", c.log())
    for memory_id in (single[0]["id"], single[-1]["id"], after):
        c.call_tool("memory_get", {"memory_id": memory_id}, agent="kite")
    assert after in search_ids(c, "where are the spare disks", mode="dense")


def test_behind_a_round_robin_proxy_requests_alternate_and_a_killed_node_loses_nothing(cluster_nodes, tmp_path):
    """The README's topology: clients talk to haproxy, which sends each request to the next node. A store answered
    by one node is found by the next request (on the other node) within the bound; kill -9 of a node in the
    middle of a store loop: the proxy stops sending to it, every acknowledged memory is on the survivor, and the
    restarted node catches up."""
    group = cluster_nodes()
    a, b = group.start(), group.start()
    with RoundRobinProxy([("127.0.0.1", a.port), ("127.0.0.1", b.port)], tmp_path / "proxy").start() as proxy:
        client = through(proxy, a)
        memory_id = store(client, "The on-call phone number changes every Monday at nine.")
        until(lambda: memory_id in search_ids(client, "when does the on-call number change"), FOUND_WITHIN)
        served = [node.log().count("POST /mcp") for node in (a, b)]
        assert all(served), served  # both nodes answered requests
        acked, failed, stop = [], [], threading.Event()

        def writer() -> None:
            i = 0
            while not stop.is_set():
                try:
                    acked.append(store(client, fact("proxied", i)))
                except (ToolCallError, Exception) as exc:  # noqa: BLE001 - a request the dying node had taken
                    failed.append(repr(exc))
                i += 1

        thread = threading.Thread(target=writer)
        thread.start()
        time.sleep(1.0)
        a.kill()
        proxy.wait_states({"node1": "DOWN"}, timeout=10)
        time.sleep(1.0)
        stop.set()
        thread.join()
        assert len(failed) <= 3, failed  # at most the requests in flight on the node when it died
        # Every acknowledged store is there; one the dying node had published but not answered may be too.
        on_b = count(b)
        assert len(acked) + 1 <= on_b <= len(acked) + 1 + len(failed)
        a.start()
        until(lambda: count(a) == on_b, FOUND_WITHIN)  # the restarted node catches up from the stream
        for memory_id in acked[:: max(1, len(acked) // 30)]:
            a.call_tool("memory_get", {"memory_id": memory_id}, agent="kite")


def test_mail_and_memory_through_the_proxy_on_one_cluster(cluster_nodes, tmp_path):
    """Both plugins on the same nodes: mail kept in JetStream (amq_nats) and replicated memory. Through the proxy,
    each call goes to the next node: kite's send is read by wren on the other node, claimed once."""
    group = cluster_nodes()
    a, b = group.start(), group.start()
    with RoundRobinProxy([("127.0.0.1", a.port), ("127.0.0.1", b.port)], tmp_path / "proxy").start() as proxy:
        client = through(proxy, a)
        sent = client.call_tool("amq_send", {"to_agent": "wren", "subject": "deploy",
                                             "body": "The release branch is cut; memory id in the thread."},
                                agent="kite")
        assert sent["status"] == "delivered"
        inbox = until(lambda: client.call_tool("amq_check", {}, agent="wren")["messages"], FOUND_WITHIN)
        assert [m["id"] for m in inbox] == [sent["id"]]
        first = client.call_tool("amq_read", {"agent": "", "msg_id": sent["id"]}, agent="wren")
        second = client.call_tool("amq_read", {"agent": "", "msg_id": sent["id"]}, agent="wren")
        assert [first["claimed"], second["claimed"]] == [True, False]
        assert first["body"].startswith("The release branch is cut")
        until(lambda: client.call_tool("amq_check", {}, agent="wren")["new_count"] == 0, FOUND_WITHIN)
    for node in (a, b):  # each answered some of those calls
        assert node.log().count("POST /mcp") >= 2


def test_more_replicas_than_nats_servers_tells_every_memory_tool_call_the_fix(cluster_nodes):
    """A memory node (mail off) asks again for connect_timeout_seconds while JetStream cannot place five replicas
    on three servers; then its memory tools answer what to start or lower, not a bare timeout (the server itself
    stays up: it loads memory in the background)."""
    node = cluster_nodes(config={"cluster": {"replicas": 5, "connect_timeout_seconds": 2}},
                         env={"PERSMEM_DISABLE_PLUGINS": "amq_maildir"}).start()
    with pytest.raises(ToolCallError) as failed:
        store(node, "a memory that has no stream to go to")
    text = str(failed.value)
    assert "could not place the memory stream PERSMEM_MEMORY within 2 s: fewer JetStream servers are online " \
           "than its 5 replica(s)" in text, text
    assert "lower [cluster] replicas" in text

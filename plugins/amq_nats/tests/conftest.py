"""Two real persmem server processes sharing one real three-node NATS JetStream cluster (the `nats_cluster`
fixture of persmem_core.testing): the same agents and tokens in both homes, [cluster] servers naming the cluster,
[server] stateless = true (as behind a round-robin proxy)."""

import pytest

from amq_nats_nodes import start_node


@pytest.fixture
def two_nodes(tmp_path, nats_cluster):
    """(node_a, node_b, nats_cluster): two persmem servers on the same cluster; stopped after the test."""
    started = []
    try:
        started.append(start_node(tmp_path / "a", nats_cluster.urls))
        started.append(start_node(tmp_path / "b", nats_cluster.urls, like=started[0]))
        yield started[0], started[1], nats_cluster
    finally:
        for node in started:
            node.stop()

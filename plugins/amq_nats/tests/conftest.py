"""Two real persmem server processes sharing one real three-node NATS JetStream cluster (the `nats_cluster`
fixture of persmem_core.sdk.testing): the same agents and tokens in both homes, [cluster] servers naming the cluster,
[server] stateless = true (as behind a round-robin proxy)."""

import pytest

from amq_nats_nodes import mail_nodes


@pytest.fixture
def two_nodes(tmp_path, nats_cluster):
    """(node_a, node_b, nats_cluster): two persmem servers on the same cluster; stopped after the test."""
    nodes = mail_nodes(tmp_path / "nodes", nats_cluster)
    try:
        yield nodes.start(), nodes.start(), nats_cluster
    finally:
        nodes.stop()

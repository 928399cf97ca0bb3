"""Starting persmem nodes on a NATS cluster, for this plugin's tests (a module of its own, not conftest: a full run
imports several conftest modules, and `from conftest import` could get another plugin's)."""

from pathlib import Path

from persmem_core.sdk.testing import ClusterNodes

NO_MEMORY = {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw"}
AGENTS = ("kite", "wren", "operator")


def node_config(cluster, replicas: int = 3) -> dict:
    """A mail node's persmem.toml on `cluster` (a NatsCluster: its servers and node1's credentials)."""
    return {"amq": {"readers": {"operator": ["*"]}}, "server": {"stateless": True},
            "cluster": {**cluster.client_settings("node1"), "replicas": replicas}}


def mail_nodes(root: Path, cluster) -> ClusterNodes:
    """Mail-only persmem nodes on `cluster` (a NatsCluster; each node with its own NATS user; the operator reads
    every inbox); `.start()` adds one."""
    return ClusterNodes(root, cluster, AGENTS, config={"amq": {"readers": {"operator": ["*"]}}}, env=NO_MEMORY)

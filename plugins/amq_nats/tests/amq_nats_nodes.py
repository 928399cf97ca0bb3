"""Starting persmem nodes on a NATS cluster, for this plugin's tests (a module of its own, not conftest: a full run
imports several conftest modules, and `from conftest import` could get another plugin's)."""

from pathlib import Path

from persmem_core.testing import ClusterNodes

NO_MEMORY = {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw"}
AGENTS = ("kite", "wren", "operator")


def node_config(urls: list[str], replicas: int = 3) -> dict:
    return {"amq": {"readers": {"operator": ["*"]}}, "server": {"stateless": True},
            "cluster": {"servers": list(urls), "replicas": replicas}}


def mail_nodes(root: Path, urls: list[str]) -> ClusterNodes:
    """Mail-only persmem nodes on the cluster at `urls` (the operator reads every inbox); `.start()` adds one."""
    return ClusterNodes(root, urls, AGENTS, config={"amq": {"readers": {"operator": ["*"]}}}, env=NO_MEMORY)

"""Starting persmem nodes on a NATS cluster, for this plugin's tests (a module of its own, not conftest: a full run
imports several conftest modules, and `from conftest import` could get another plugin's)."""

import shutil
from pathlib import Path

from persmem_core.testing import RunningServer, clean_env, free_port, start_server, write_config

NO_MEMORY = {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw"}
AGENTS = ("kite", "wren", "operator")


def node_config(urls: list[str], replicas: int = 3) -> dict:
    return {"amq": {"readers": {"operator": ["*"]}}, "server": {"stateless": True},
            "cluster": {"servers": list(urls), "replicas": replicas}}


def start_node(home: Path, urls: list[str], like: RunningServer | None = None) -> RunningServer:
    """A persmem server in `home` on the cluster; `like`: another node whose agents (and tokens) it shares."""
    write_config(home, node_config(urls))
    if like is None:
        return start_server(home, AGENTS, clean_env(home, **NO_MEMORY))
    shutil.copyfile(like.home / "agents.json", home / "agents.json")
    return RunningServer(home, clean_env(home, **NO_MEMORY), free_port(), dict(like.tokens)).start()

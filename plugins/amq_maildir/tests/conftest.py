from pathlib import Path

import pytest

from persmem_amq_maildir.config import AmqConfig
from persmem_amq_maildir.store import MailStore
from persmem_core.testing import clean_env, start_server, write_config

# Servers in these tests run without the memory plugin (its model load is the slow part of a start);
# tests/test_chorus_bootstrap.py at the root checks the two plugins together.
NO_MEMORY = {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw"}


@pytest.fixture
def store(tmp_path) -> MailStore:
    """A mail root in a temp folder with agents kite, wren and operator (operator may read every inbox)."""
    config = AmqConfig(agents=["kite", "wren", "operator"], readers={"operator": ["*"]})
    return MailStore(tmp_path / "amq", config).open()


def serve(home: Path, config: dict | None = None, agents=("kite", "wren", "operator")):
    write_config(home, config or {"amq": {"readers": {"operator": ["*"]}}})
    return start_server(home, agents, clean_env(home, **NO_MEMORY))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = serve(tmp_path_factory.mktemp("home"))
    yield running
    running.stop()

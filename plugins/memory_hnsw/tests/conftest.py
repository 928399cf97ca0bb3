import os

import pytest

from persmem_core.agents import AgentStore
from persmem_core.testing import RunningServer, free_port


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory):
    """One running server for tests that only need a live store (model loading is the slow part)."""
    home = tmp_path_factory.mktemp("shared-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERSMEM_")} | {"PERSMEM_HOME": str(home)}
    store = AgentStore(home)
    tokens = {name: store.add(name).token for name in ("kite", "wren")}
    server = RunningServer(home, env, free_port(), tokens).start()
    yield server
    server.stop()

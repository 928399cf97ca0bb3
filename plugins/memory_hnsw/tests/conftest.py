import pytest

from persmem_core.testing import start_server


@pytest.fixture(scope="session")
def shared_server(tmp_path_factory):
    """One running server for tests that only need a live store (model loading is the slow part)."""
    server = start_server(tmp_path_factory.mktemp("shared-home"), agents=("kite", "wren"))
    yield server
    server.stop()

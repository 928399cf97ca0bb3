import pytest

from fakeweb import FakeWeb, serve_on, start  # tests/ is on sys.path under pytest's default import mode


@pytest.fixture(scope="module")
def web():
    """A fake SearXNG + internal service on 127.0.0.1 and an 'allowed' web site on 127.0.0.2."""
    internal, site = serve_on("127.0.0.1"), serve_on("127.0.0.2")
    FakeWeb.internal_url = f"http://127.0.0.1:{internal.server_address[1]}/secret"
    yield {"searx": f"http://127.0.0.1:{internal.server_address[1]}", "internal_port": internal.server_address[1],
           "site": f"http://127.0.0.2:{site.server_address[1]}"}
    internal.shutdown()
    site.shutdown()


@pytest.fixture(scope="module")
def server(tmp_path_factory, web):
    running = start(tmp_path_factory.mktemp("searxhome"), web["searx"])
    yield running
    running.stop()

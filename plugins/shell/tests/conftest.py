import pytest

from persmem_core.sdk.testing import clean_env, start_server, write_config


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A workspace folder with a few files, and an outside folder beside it with a secret."""
    base = tmp_path_factory.mktemp("shellws")
    root = base / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hello')\n# TODO: fix\n")
    (root / "notes.txt").write_text("one\ntwo\nthree\n")
    (base / "ws-evil").mkdir()
    (base / "ws-evil" / "x").write_text("sibling prefix secret")
    (base / "outside").mkdir()
    (base / "outside" / "secret.txt").write_text("TOP SECRET")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory, ws):
    home = tmp_path_factory.mktemp("shellhome")
    write_config(home, {"workspace": {"roots": [str(ws)]},
                        "shell": {"max_output_bytes": 4096,
                                  "extra_allow": {"sleep": {}, "python3": {"deny": ["-c", "-m", "-i"]}}}})
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS="memory_hnsw,amq_maildir,git,searxng",
                    PERSMEM_TEST_SECRET="server-secret-value", LD_PRELOAD="")
    running = start_server(home, ("kite",), env)
    yield running
    running.stop()


@pytest.fixture
def call(server):
    from persmem_core.sdk.testing import ToolCallError

    def call_tool(tool, **args):
        return server.call_tool(tool, args, agent="kite")

    call_tool.Error = ToolCallError
    return call_tool

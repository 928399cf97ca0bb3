import pytest

from persmem_core.sdk.testing import ToolCallError, clean_env, start_server, write_config


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("gitws")
    (base / "ws").mkdir()
    (base / "remotes").mkdir()
    (base / "ws-evil").mkdir()
    (base / "other").mkdir()
    return base


@pytest.fixture(scope="module")
def server(tmp_path_factory, roots):
    home = tmp_path_factory.mktemp("githome")
    write_config(home, {"workspace": {"roots": [str(roots / "ws")]},
                        "git": {"remotes": [str(roots / "remotes") + "/"],
                                "authors": {"wren": "Wren Bird <wren@example.org>"}}})
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS="memory_hnsw,amq_maildir,shell,searxng")
    running = start_server(home, ("kite", "wren"), env)
    yield running
    running.stop()


@pytest.fixture
def op(server):
    def git_op(operation, repo_path, args="", clone_url="", agent="kite"):
        return server.call_tool("git_op", {"operation": operation, "repo_path": repo_path, "args": args,
                                           "clone_url": clone_url}, agent=agent)

    git_op.Error = ToolCallError
    return git_op

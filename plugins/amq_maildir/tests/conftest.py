import contextlib
import os
from pathlib import Path

import pytest

from persmem_amq_maildir.config import AmqConfig
from persmem_amq_maildir.store import MailStore
from persmem_core.sdk.testing import clean_env, start_server, write_config

# Servers in these tests run without the memory plugin (its model load is the slow part of a start);
# tests/test_chorus_bootstrap.py at the root checks the two plugins together.
NO_MEMORY = {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw"}


@pytest.fixture
def no_memory() -> dict[str, str]:
    return dict(NO_MEMORY)


@pytest.fixture
def store(tmp_path) -> MailStore:
    """A mail root in a temp folder with agents kite, wren and operator (operator may read every inbox)."""
    config = AmqConfig(agents=["kite", "wren", "operator"], readers={"operator": ["*"]})
    return MailStore(tmp_path / "amq", config).open()


def serve(home: Path, config: dict | None = None, agents=("kite", "wren", "operator")):
    write_config(home, config or {"amq": {"readers": {"operator": ["*"]}}})
    return start_server(home, agents, clean_env(home, **NO_MEMORY))


# The tools' tests that take `server` run once per place mail is kept: the Maildir root, and NATS JetStream
# (persmem-plugin-amq-nats answering the `amq_backend` hook, on a one-node NATS server of its own). A test that
# looks at or plants files in the Maildir is marked `maildir_only`.
BACKENDS = ("maildir", "nats")


def pytest_configure(config):
    config.addinivalue_line("markers", "maildir_only: the test reads or writes Maildir files, so it runs only on "
                            "the Maildir backend")


def pytest_generate_tests(metafunc):
    if "server" in metafunc.fixturenames:
        maildir_only = metafunc.definition.get_closest_marker("maildir_only") is not None
        metafunc.parametrize("server", ["maildir"] if maildir_only else BACKENDS, indirect=True, scope="module")


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    """A running server without the memory plugin (agents kite, wren, operator; operator reads every inbox),
    its mail in the Maildir root or (param "nats") in NATS JetStream."""
    config = {"amq": {"readers": {"operator": ["*"]}}}
    with contextlib.ExitStack() as stack:
        if getattr(request, "param", "maildir") == "nats":
            config["cluster"] = {**stack.enter_context(nats_server(tmp_path_factory)), "replicas": 1}
        running = serve(tmp_path_factory.mktemp("home"), config)
        stack.callback(running.stop)
        yield running


@contextlib.contextmanager
def nats_server(tmp_path_factory):
    """A one-node NATS JetStream server of its own (so no mail is left from other tests); yields the [cluster]
    settings of a node on it (servers, credentials)."""
    import importlib.util

    if importlib.util.find_spec("persmem_amq_nats") is None or importlib.util.find_spec("nats") is None:
        pytest.skip("persmem-plugin-amq-nats (and nats-py) are not installed: no NATS backend to test")
    from persmem_core.sdk.testing import NatsCluster

    cluster = NatsCluster(tmp_path_factory.mktemp("nats"), size=1)
    try:
        yield cluster.start().client_settings()
    finally:
        cluster.stop()


@pytest.fixture
def amq_server(tmp_path):
    """Returns start(config=None, agents=...) -> a running server without the memory plugin; stopped after."""
    started = []

    def start(config: dict | None = None, agents=("kite", "wren", "operator")):
        running = serve(tmp_path / f"home{len(started)}", config, agents)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


def _hostile_files(new: Path) -> set[str]:
    """Write eleven files that are not messages into a mailbox folder; returns their names."""
    (new / "empty.md").write_bytes(b"")
    (new / "no-frontmatter.md").write_text("just text\n")
    (new / "unclosed.md").write_text('---json\n{"id": "x"\n')
    (new / "bad-json.md").write_text("---json\n{not json}\n---\nbody\n")
    (new / "missing-fields.md").write_text('---json\n{"schema": 1}\n---\nbody\n')
    (new / "wrong-types.md").write_text('---json\n{"id": 5, "from": [], "to": "wren", "created": 1}\n---\nb\n')
    (new / "latin1.md").write_bytes(b'---json\n{"id":"a","from":"kite","to":"wren","created":"x"}\n---\n\xff\xfe\n')
    (new / "huge.md").write_bytes(b'---json\n{"id":"h","from":"kite","to":"wren","created":"x"}\n---\n' + b"a" * 5_000_000)
    os.symlink("/etc/passwd", new / "symlink.md")
    os.mkfifo(new / "fifo.md")
    (new / "folder.md").mkdir()
    return set(os.listdir(new)) - {n for n in os.listdir(new) if n.startswith("2")}


@pytest.fixture
def hostile_files():
    return _hostile_files

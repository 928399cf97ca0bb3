"""pytest fixtures for testing persmem and its plugins for real.

Installed as a pytest plugin (entry point `pytest11`), so any project with persmem installed can use them (a
plugin's tests import the helpers below from `persmem_core.sdk.testing`). Each fixture returns a factory:

- `persmem_env(**extra)` -> an environment dict with a fresh PERSMEM_HOME.
- `persmem_host(config=None, **extra_env)` -> a Host in a temp home, with that config written.
- `persmem_server(agents=(), config=None, env=None)` -> a RunningServer: a real `persmem serve` process over
  Streamable HTTP on a free loopback port; `.call_tool(name, args, agent=...)` calls through a real MCP client,
  `.list_tools(agent=...)`, `.client(agent)` an async MCP client session, `.tokens[agent]` the agent's bearer
  token, `.log()`, `.kill()`, `.stop()`. Every server started is stopped after the test.
- `persmem_stdio(agent=None, config=None, env=None)` -> an async context manager: an MCP client connected to
  `persmem serve --transport stdio` in a subprocess (the agent is registered first if new).
- `nats_cluster`: a started three-node NATS JetStream cluster of real nats-server processes in tmp_path
  (persmem_core/cluster/local_cluster.py: `.client_settings(name)`, `.connect_options()`, `.kill(i)`, `.restart(i)`), closed
  (an nkey per client, as `persmem cluster up` makes it), stopped after the test.
- `cluster_nodes(config=None, env=None, agents=("kite", "wren"))` -> ClusterNodes: persmem nodes on that cluster.
- `chromium_browser()`, `browser_page(browser)`, `dashboard_login(page, server, agent)`: the dashboard in a real
  headless Chromium (Playwright); `async_chromium_browser()` the same browser for tests driving it from an event
  loop.

`RunningServer` (a `persmem serve` subprocess and its MCP client, `persmem_command`) and the readers of a tool's
answer (`tool_result`, `assert_clear_outcome`, `ToolCallError`, `CRASHED`) live in persmem_core/transport
(server_process.py, tool_answers.py): import them from there. A plugin's tests import all of these from
`persmem_core.sdk.testing`, the public face (docs/plugins.md, "Testing your plugin").

The run shares one PERSMEM_CACHE_DIR (made at its start, removed at its end): every server's memory plugin
prepares its model once per run, not once per home.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from persmem_core.auth.agents import AgentStore
from persmem_core.net.addresses import free_port
from persmem_core.transport.server_process import RunningServer
from persmem_core.transport.tool_answers import assert_clear_outcome, tool_result


# A raw MCP initialize request and the headers a Streamable HTTP POST needs, for tests below the client.
MCP_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def write_config(home: Path, config: dict | str | None) -> None:
    home.mkdir(parents=True, exist_ok=True)
    if config:
        text = config if isinstance(config, str) else tomli_w.dumps(config)
        (home / "persmem.toml").write_text(text)


def assert_tools_answer_clearly(server: RunningServer, calls: list[tuple[str, dict]], agent: str) -> list:
    """Call the tools in one MCP session as `agent`; every outcome must be clear (assert_clear_outcome) and the
    server must still answer afterwards. Returns the raw results. The body of a property-based tool test."""
    import anyio

    async def run():
        async with server.client(agent) as client:
            results = [await client.call_tool(name, args) for name, args in calls]
            alive = await client.call_tool("persmem_whoami", {})
        return results, alive

    results, alive = anyio.run(run)
    for result in results:
        assert_clear_outcome(result)
    assert tool_result(alive)["agent"] == agent
    return results


RUN_WIDE_ENV = ("PERSMEM_CACHE_DIR", "PERSMEM_DEFAULT_TOOL_SETS")  # set for the whole test run (pytest_configure)


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """This process's environment without PERSMEM_* variables (but the run-wide ones: PERSMEM_CACHE_DIR, which
    the test run shares, and PERSMEM_DEFAULT_TOOL_SETS=all), with PERSMEM_HOME=home."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERSMEM_") or k in RUN_WIDE_ENV}
    return env | {"PERSMEM_HOME": str(home)} | extra


def pytest_configure(config):
    """Every server of the test run shares one PERSMEM_CACHE_DIR (made for the run, removed after it), so a
    prepared model is made once per run, not once per home (about 6 s of CPU each on a small box). A run started
    with PERSMEM_CACHE_DIR set keeps it."""
    # The servers of the test run list every tool set: a test of one plugin's tools needs no `agent tools` step;
    # the tests of the default sets (tests/test_tool_sets.py) leave this out of their environment.
    os.environ.setdefault("PERSMEM_DEFAULT_TOOL_SETS", "all")
    if not os.environ.get("PERSMEM_CACHE_DIR"):
        import tempfile

        os.environ["PERSMEM_CACHE_DIR"] = config._persmem_cache = tempfile.mkdtemp(prefix="persmem-test-cache-")


def pytest_unconfigure(config):
    made = getattr(config, "_persmem_cache", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)
        os.environ.pop("PERSMEM_CACHE_DIR", None)


def start_server(home: Path, agents=(), env: dict[str, str] | None = None, timeout: float = 60.0,
                 prefix: tuple = ()) -> RunningServer:
    """Create `agents` (tokens in `.tokens`) in `home` and start `persmem serve` there on a free port (under the
    program `prefix` names, if any)."""
    store = AgentStore(home)
    tokens = {name: store.add(name).token for name in agents}
    return RunningServer(home, env or clean_env(home), free_port(), tokens, prefix).start(timeout)


@pytest.fixture
def persmem_env(tmp_path):
    """Returns make_env(**extra) -> environment with a fresh PERSMEM_HOME under tmp_path."""

    def make_env(**extra: str) -> dict[str, str]:
        return clean_env(tmp_path / "home", **extra)

    return make_env


@pytest.fixture
def persmem_host(persmem_env):
    """Returns make_host(config=None, **env) -> a Host in a fresh temp home."""
    from persmem_core.host import Host

    def make_host(config: dict | str | None = None, **extra_env: str) -> Host:
        env = persmem_env(**extra_env)
        write_config(Path(env["PERSMEM_HOME"]), config)
        return Host(environ=env)

    return make_host


@pytest.fixture
def persmem_server(persmem_env) -> Iterator[Any]:
    """Returns start(agents=(), config=None, env=None) -> RunningServer; all are stopped after the test."""
    started: list[RunningServer] = []

    def start(agents=(), config: dict | str | None = None, env: dict[str, str] | None = None) -> RunningServer:
        environ = persmem_env(**(env or {}))
        home = Path(environ["PERSMEM_HOME"])
        if started:  # a second server in one test gets its own home
            home = home.with_name(f"home{len(started)}")
            environ["PERSMEM_HOME"] = str(home)
        write_config(home, config)
        server = start_server(home, agents, environ)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def persmem_stdio(persmem_env):
    """Returns connect(agent=None, config=None, env=None): an async context manager yielding an MCP client
    talking to `persmem serve --transport stdio` in a subprocess. The agent (`agent`, or PERSMEM_AGENT in
    `env`) is created in the home first when it does not exist: stdio serves only registered agents."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    @contextlib.asynccontextmanager
    async def connect(agent: str | None = None, config: dict | str | None = None, env: dict[str, str] | None = None):
        environ = persmem_env(**(env or {}))
        home = Path(environ["PERSMEM_HOME"])
        write_config(home, config)
        name = agent or environ.get("PERSMEM_AGENT")
        if name and name not in AgentStore(home).agents():
            AgentStore(home).add(name)
        args = ["-m", "persmem_core", "serve", "--transport", "stdio"] + (["--agent", agent] if agent else [])
        params = StdioServerParameters(command=sys.executable, args=args, env=environ)
        with open(Path(environ["PERSMEM_HOME"]) / "stdio.log", "a") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                yield client

    return connect


class ClusterNodes:
    """persmem server processes on one NATS cluster (docs/scale-out.md), for tests and benchmarks: `start()` adds a
    node with a home of its own under `root`, [cluster] servers = `urls`, [server] stateless, and the first node's
    agents, tokens and key file (every node of a cluster shares those). `config` is merged into every node's
    persmem.toml; `env` into its environment (say, PERSMEM_DISABLE_PLUGINS)."""

    SHARED_FILES = ("agents.json", "persmem.key")

    def __init__(self, root: Path, urls, agents=("kite", "wren"), config: dict | None = None,
                 env: dict[str, str] | None = None):
        """`urls`: the cluster's client URLs, or the NatsCluster itself: then each node connects as its own NATS user
        (node1, node2, ... of the cluster's clients; any later node as the first)."""
        self.nats = urls if hasattr(urls, "client_settings") else None
        self.root, self.urls, self.agents = Path(root), list(self.nats.urls if self.nats else urls), tuple(agents)
        self.config, self.env = config or {}, env or {}
        self.servers: list[RunningServer] = []

    def start(self, timeout: float = 60.0) -> RunningServer:
        name = f"node{len(self.servers) + 1}"
        home = self.root / name
        cluster = {"servers": self.urls, "node": name}
        if self.nats is not None:
            cluster = {**self.nats.client_settings(name if name in self.nats.clients else None), **cluster}
        config = {"cluster": cluster, "server": {"stateless": True}}
        for section, values in self.config.items():
            config[section] = {**config.get(section, {}), **values}
        write_config(home, config)
        env = clean_env(home, **self.env)
        if not self.servers:
            server = start_server(home, self.agents, env, timeout)
        else:
            first = self.servers[0]
            for shared in self.SHARED_FILES:
                if (first.home / shared).exists():
                    shutil.copy2(first.home / shared, home / shared)
            server = RunningServer(home, env, free_port(), dict(first.tokens)).start(timeout)
        self.servers.append(server)
        return server

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


@pytest.fixture
def cluster_nodes(tmp_path, nats_cluster) -> Iterator[Any]:
    """Returns make(config=None, env=None, agents=("kite", "wren")) -> a ClusterNodes on the test's `nats_cluster`;
    every node started is stopped after the test."""
    made: list[ClusterNodes] = []

    def make(config: dict | None = None, env: dict[str, str] | None = None, agents=("kite", "wren")) -> ClusterNodes:
        made.append(ClusterNodes(tmp_path / f"nodes{len(made) + 1}", nats_cluster, agents, config, env))
        return made[-1]

    yield make
    for group in made:
        group.stop()


@pytest.fixture
def nats_cluster(tmp_path) -> Iterator[Any]:
    """A started three-node NATS JetStream cluster (persmem_core.cluster.local_cluster.NatsCluster) under tmp_path/nats, closed
    as `persmem cluster up` makes it (an nkey per client): `.client_settings(name)` for a node's [cluster] section,
    `.connect_options()` for nats.connect (as its administrator), `.kill(i)` / `.restart(i)` for failures; always
    stopped after the test."""
    from persmem_core.cluster.local_cluster import NatsCluster

    cluster = NatsCluster(tmp_path / "nats", size=3)
    try:
        yield cluster.start()
    finally:
        cluster.stop()


async def publish_until_acked(js, subject: str, payload: bytes, headers: dict[str, str] | None = None,
                              within: float = 15.0):
    """Publish on a JetStream context `js` (with `headers`), retrying while the stream has no leader for a moment
    (no responders / no response: an election after its leader died, or a busy box): the ack is the proof a quorum
    stored it. One message id for all tries (`headers`' Nats-Msg-Id, else a new one), so a try whose ack was lost
    is not stored twice."""
    import asyncio
    import time
    import uuid

    from nats.errors import NoRespondersError, TimeoutError as NatsTimeout
    from nats.js.errors import NoStreamResponseError

    deadline = time.monotonic() + within
    headers = {"Nats-Msg-Id": uuid.uuid4().hex, **(headers or {})}
    while True:
        try:
            return await js.publish(subject, payload, timeout=2, headers=headers)
        except (NoRespondersError, NoStreamResponseError, NatsTimeout):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


# -- the dashboard in a real browser (Chromium from the distribution, driven by Playwright) ----------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"


CHROMIUM_ARGS = ["--disable-background-networking", "--disable-component-update", "--no-first-run"]


@contextlib.contextmanager
def chromium_browser(artifacts: Path | None = None) -> Iterator[Any]:
    """A headless Chromium for a test module (`artifacts`: a folder for screenshots, made if missing). Playwright is
    imported here: only browser tests need it."""
    from playwright.sync_api import sync_playwright

    if artifacts is not None:
        artifacts.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@contextlib.asynccontextmanager
async def async_chromium_browser() -> AsyncIterator[Any]:
    """`chromium_browser` for a test that drives the browser from inside an event loop (an MCP client's OAuth
    redirect handler opening the consent page, for instance)."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        chromium = await p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            await chromium.close()


@contextlib.contextmanager
def browser_page(browser, width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A page in a fresh browser context; `page.dialogs` collects (and dismisses) every alert, so a test can assert
    that hostile text never ran."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.dialogs = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    try:
        yield page
    finally:
        context.close()


def dashboard_login(page, server: RunningServer, agent: str = "kite", landing: str = "overview") -> str:
    """Log `agent` in to the server's dashboard with its token; returns the dashboard's base URL."""
    base = server.url.replace("/mcp", "/dashboard")
    page.goto(base + "/login")
    page.fill("#token", server.tokens[agent])
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/{landing}")
    return base

"""One home, any number of clients: the process that owns the home (`persmem serve`, or the first stdio
session) serves every other local client over its unix socket; stdio sessions started while it runs use it
instead of failing, and carry on when the owner restarts under them."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import time
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx2
import pytest

from persmem_core.auth.agents import AgentStore
from persmem_core.paths import socket_path
from persmem_core.net.addresses import free_port
from persmem_core.transport.server_process import RunningServer, persmem_command
from persmem_core.transport.tool_answers import tool_result

AGENTS = ["kite", "wren", "owl"]


def _flatten(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [inner for sub in exc.exceptions for inner in _flatten(sub)]
    return [exc] + (_flatten(exc.__context__) if exc.__context__ else [])


def _store(client_result) -> str:
    return tool_result(client_result)["id"]


async def _content(client, memory_id: str) -> str:
    return tool_result(await client.call_tool("memory_get", {"memory_id": memory_id}))["content"]


# -- any number of clients at once ---------------------------------------------------------------
def test_http_server_three_stdio_sessions_and_a_cli_share_one_store_through_a_restart(persmem_server, persmem_stdio,
                                                                                     run_cli):
    server = persmem_server(agents=AGENTS)
    mode = os.stat(socket_path(server.home)).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600

    async def run():
        async with AsyncExitStack() as stack:
            clients = {name: await stack.enter_async_context(persmem_stdio(agent=name)) for name in AGENTS}
            ids = {}
            for name, client in clients.items():  # every stdio session writes; every other one reads it
                ids[name] = _store(await client.call_tool("memory_store", {"content": f"{name} says the build is green",
                                                                           "project": "shared"}))
            for reader in clients.values():
                for name, memory_id in ids.items():
                    assert await _content(reader, memory_id) == f"{name} says the build is green"
            who = {name: tool_result(await c.call_tool("persmem_whoami", {})) for name, c in clients.items()}
            async with server.client("kite") as http:  # the HTTP client sees the stdio writes too
                assert await _content(http, ids["owl"]) == "owl says the build is green"
                ids["http"] = _store(await http.call_tool("memory_store", {"content": "written over HTTP",
                                                                           "project": "shared"}))
            exported = run_cli("memory", "export", "-", env=server.env)  # a CLI command while the server runs
            assert exported.returncode == 0, exported.stderr
            for name in AGENTS:
                assert f"{name} says the build is green" in exported.stdout
            assert "written over HTTP" in exported.stdout

            server.stop()  # the owner goes away under three open sessions...
            during = _store(await clients["wren"].call_tool("memory_store", {"content": "written while the HTTP "
                                                                             "server was down", "project": "shared"}))
            server.start()  # ...and comes back: it takes the home from the stdio session that held it meanwhile
            for client in clients.values():
                assert await _content(client, during) == "written while the HTTP server was down"
                assert await _content(client, ids["http"]) == "written over HTTP"
            async with server.client("owl") as http:
                assert await _content(http, during) == "written while the HTTP server was down"
            return who

    who = anyio.run(run)
    assert {name: w["agent"] for name, w in who.items()} == {name: name for name in AGENTS}
    assert all(w["transport"] == "stdio" for w in who.values())
    assert "Traceback" not in server.log()


def test_without_a_server_the_first_stdio_session_owns_the_home_and_the_next_takes_over(persmem_stdio, persmem_env):
    AgentStore(persmem_env()["PERSMEM_HOME"]).add("kite")
    AgentStore(persmem_env()["PERSMEM_HOME"]).add("wren")

    async def run():
        async with persmem_stdio(agent="wren") as second_holder:
            async with persmem_stdio(agent="kite") as first:
                kept = _store(await first.call_tool("memory_store", {"content": "first session's note"}))
                assert await _content(second_holder, kept) == "first session's note"
            # the first session (the owner) has ended: the next call finds no owner and becomes it
            later = _store(await second_holder.call_tool("memory_store", {"content": "after the owner left"}))
            assert await _content(second_holder, kept) == "first session's note"
            return later

    anyio.run(run)
    assert not socket_path(persmem_env()["PERSMEM_HOME"]).exists()  # the last owner cleaned up after itself


def test_serve_takes_the_home_from_a_stdio_session_which_carries_on(persmem_stdio, persmem_env, run_cli):
    env = persmem_env()
    tokens = {"kite": AgentStore(env["PERSMEM_HOME"]).add("kite").token}

    async def run():
        async with persmem_stdio(agent="kite") as client:  # owns the home
            before = _store(await client.call_tool("memory_store", {"content": "before serve started"}))
            server = RunningServer(Path(env["PERSMEM_HOME"]), env, free_port(), tokens).start()
            try:
                after = _store(await client.call_tool("memory_store", {"content": "after serve took the home"}))
                async with server.client("kite") as http:
                    assert await _content(http, before) == "before serve started"
                    assert await _content(http, after) == "after serve took the home"
                card = httpx2.Client(transport=httpx2.HTTPTransport(uds=str(socket_path(env["PERSMEM_HOME"])))) \
                    .get("http://persmem.local/_local/owner").json()
                assert card["role"] == "http" and card["pid"] == server.process.pid
            finally:
                server.stop()
            assert server.process.returncode == 0

    anyio.run(run)


# -- one clear line for a mistake ------------------------------------------------------------------
def test_a_second_serve_names_the_running_one_in_one_line(persmem_server, run_cli):
    server = persmem_server()
    second = run_cli("serve", "--port", "0", env=server.env)
    assert second.returncode == 1
    assert "Traceback" not in second.stderr and len(second.stderr.strip().splitlines()) == 1, second.stderr
    assert f"pid {server.process.pid}" in second.stderr and server.url in second.stderr
    assert "serving MCP" not in second.stdout + second.stderr  # nothing claims to serve that does not


def test_a_port_in_use_is_one_line_naming_the_setting(persmem_env, run_cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = run_cli("serve", "--port", str(taken.getsockname()[1]), env=persmem_env())
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "--port or [server] port" in result.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_stops_cleanly_with_exit_0_on_a_signal(persmem_server, sig):
    server = persmem_server()
    server.process.send_signal(sig)
    assert server.process.wait(timeout=30) == 0
    assert "Aborted" not in server.log() and "Traceback" not in server.log()
    assert not socket_path(server.home).exists()


def test_a_stdio_session_stops_cleanly_on_sigterm_while_its_client_is_silent(persmem_env):
    env = persmem_env()
    proc = subprocess.Popen(persmem_command("serve", "--transport", "stdio"), env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not socket_path(env["PERSMEM_HOME"]).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()
    assert not socket_path(env["PERSMEM_HOME"]).exists()
    proc.stdin.close()


# -- the local socket's door -----------------------------------------------------------------------
def test_the_socket_serves_only_registered_agents_that_are_not_revoked(persmem_server):
    server = persmem_server(agents=["kite"])
    AgentStore(server.home).revoke("kite")
    http = httpx2.Client(transport=httpx2.HTTPTransport(uds=str(socket_path(server.home))), timeout=30)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    for agent, fix in (("nobody", "persmem agent add nobody"), ("kite", "revoked")):
        answer = http.post("http://persmem.local/mcp", json=body, headers=headers | {"x-persmem-agent": agent})
        assert answer.status_code == 403 and fix in answer.json()["error"]["message"]


# -- HTTP answers a person or a client can act on --------------------------------------------------
def test_a_body_over_the_limit_is_a_jsonrpc_error_naming_the_setting(persmem_server):
    server = persmem_server(config={"server": {"max_body_bytes": 4096}})

    async def run():
        async with server.client() as client:
            return await client.call_tool("memory_store", {"content": "x" * 10_000})

    with pytest.raises(BaseException) as caught:
        anyio.run(run)
    said = " ".join(str(exc) for exc in _flatten(caught.value))
    assert "4,096 bytes ([server] max_body_bytes)" in said, said


def test_root_leads_to_the_dashboard_and_the_startup_lines_say_where_and_who(persmem_server):
    server = persmem_server()
    root = httpx2.get(server.base_url + "/", follow_redirects=False)
    assert root.status_code == 302 and root.headers["location"] == "/dashboard/"
    assert httpx2.get(server.base_url + "/favicon.ico").status_code == 404  # not a 401 on every page
    log = server.log()
    assert f"serving MCP on {server.url}" in log and f"dashboard {server.base_url}/dashboard/" in log
    assert "served as agent 'local'" in log
    AgentStore(server.home).add("kite")
    server.stop()
    server.start()
    assert "bearer token or secret path of one of 1 agent(s)" in server.log()


def test_a_home_too_long_for_a_socket_name_gets_its_socket_in_a_private_runtime_folder(tmp_path, persmem_stdio):
    from persmem_core.testing import clean_env

    home = tmp_path / ("long-" + "x" * 120) / "home"
    home.mkdir(parents=True)
    env = clean_env(home)
    server = RunningServer(home, env, free_port(), {}).start()
    try:
        where = socket_path(home)
        assert not where.is_relative_to(home) and stat.S_IMODE(os.stat(where).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(where.parent).st_mode) == 0o700 and os.stat(where.parent).st_uid == os.getuid()

        async def run():
            async with persmem_stdio(env={"PERSMEM_HOME": str(home)}) as client:
                memory_id = _store(await client.call_tool("memory_store", {"content": "from a long home"}))
            async with server.client() as http:
                return await _content(http, memory_id)

        assert anyio.run(run) == "from a long home"
    finally:
        server.stop()


def test_replies_and_the_tool_contract_hold_over_stdio_too(persmem_stdio, persmem_env):
    """Issue 15's reply sizes and tool contract, through a stdio session (the HTTP side is in the plugins' tests)."""
    AgentStore(persmem_env()["PERSMEM_HOME"]).add("wren")

    async def run():
        async with persmem_stdio(agent="kite") as client:
            await client.call_tool("memory_store", {"content": "The infra team owns the load balancers.",
                                                    "project": "infra"})
            big = await client.call_tool("memory_search", {"query": "load balancers " * 70_000})  # ~1 MB
            hint = tool_result(await client.call_tool("memory_search", {"query": "load balancers",
                                                                        "project": "infr"}))
            ranges = await client.call_tool("memory_search", {"query": "x", "since": "2026-05-01",
                                                              "until": "2026-04-01"})
            unknown = await client.call_tool("memory_search", {"query": "x", "projct": "infra"})
            reply = await client.call_tool("amq_send", {"to_agent": "wren", "body": "hi",
                                                        "reply_to": "nope"})
            return big, hint, ranges, unknown, reply

    big, hint, ranges, unknown, reply = anyio.run(run)
    assert not big.is_error and len(big.content[0].text) < 10_000
    assert "'infra'" in hint["hint"]
    assert ranges.is_error and "is after until" in ranges.content[0].text
    assert unknown.is_error and "did you mean 'project'" in unknown.content[0].text
    assert reply.is_error and "nope" in reply.content[0].text and "amq_check" in reply.content[0].text


def test_plugin_agent_routes_are_served_on_the_socket_as_the_named_agent(persmem_server):
    """Local clients (hooks, the CLI) reach plugins' agent routes through the socket; pages with their own login
    (the dashboard) stay on the TCP port only."""
    server = persmem_server(agents=["kite", "wren"])
    server.call_tool("amq_send", {"to_agent": "kite", "body": "over the socket"}, agent="wren")
    local = httpx2.Client(transport=httpx2.HTTPTransport(uds=str(socket_path(server.home))), timeout=30)
    mine = local.get("http://persmem.local/amq/messages", headers={"x-persmem-agent": "kite"})
    assert mine.status_code == 200 and "over the socket" in mine.text
    assert local.get("http://persmem.local/amq/messages", headers={"x-persmem-agent": "nobody"}).status_code == 403
    assert local.get("http://persmem.local/dashboard/", headers={"x-persmem-agent": "kite"}).status_code == 404

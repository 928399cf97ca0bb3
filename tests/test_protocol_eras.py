"""Both MCP protocol eras, on every transport: handshake-era clients (`initialize`, MCP 2025-11-25 and earlier)
and 2026-07-28 clients (stateless requests, `server/discover`, no session id, the envelope in `params._meta`).

Real `persmem serve` processes and the mcp SDK's own client in each mode. Over stdio the process may forward to
a running owner (here the HTTP server) or be the owner itself; both are covered.
"""

import contextlib
import json
import subprocess
import sys
import time

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.subscriptions import SubscriptionLost
from mcp.client.streamable_http import streamable_http_client

from persmem_core.auth.agents import AgentStore
from persmem_core.testing import clean_env, start_server
from persmem_core.transport.server_process import persmem_command
from persmem_core.transport.tool_answers import assert_clear_outcome, tool_result

MODERN = "2026-07-28"
ENVELOPE = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"}}
# The mailbox is the one plugin kept: its tools give a call that fails with a clear error (sending as another agent)
# and a side effect to check that a refused request did nothing.
DISABLED = "memory_hnsw,shell,git,searxng,dashboard,sessions"
ERAS = {"legacy": "2025-11-25", MODERN: MODERN}


def era_env(home):
    return clean_env(home, PERSMEM_DISABLE_PLUGINS=DISABLED)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """kite has a bearer token, wren a secret path; one server for the module."""
    home = tmp_path_factory.mktemp("eras") / "home"
    secret_path = AgentStore(home).add("wren", token=False, secret_path=True).secret_path
    running = start_server(home, agents=["kite"], env=era_env(home))
    running.secret_url = f"{running.base_url}/{secret_path}/mcp"
    yield running
    running.stop()


@pytest.fixture(scope="module")
def lone_home(tmp_path_factory):
    """A home no server runs in: a stdio session there becomes the owner itself."""
    home = tmp_path_factory.mktemp("lone") / "home"
    AgentStore(home).add("kite")
    return home


@contextlib.asynccontextmanager
async def http_client(url, mode, token=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30.0) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


@contextlib.asynccontextmanager
async def stdio_session(home, mode, agent="kite"):
    args = ["-m", "persmem_core", "serve", "--transport", "stdio", "--agent", agent]
    params = StdioServerParameters(command=sys.executable, args=args, env=era_env(home))
    with open(home / "stdio.log", "a") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode, read_timeout_seconds=30) as client:
            yield client


async def check_session(client, mode, agent, transport):
    """What every client must get, in either era: the tools, its own identity, and a clear refusal."""
    assert client.protocol_version == ERAS[mode]
    names = {tool.name for tool in (await client.list_tools()).tools}
    assert {"persmem_whoami", "amq_send", "amq_read"} <= names
    who = tool_result(await client.call_tool("persmem_whoami", {}))
    assert (who["agent"], who["transport"]) == (agent, transport)
    other = "wren" if agent == "kite" else "kite"
    refused = await client.call_tool("amq_send", {"from_agent": other, "to_agent": other, "body": "hi"})
    assert refused.is_error
    assert_clear_outcome(refused)
    text = refused.content[0].text
    assert "unknown argument 'from_agent' for amq_send" in text  # the sender is the caller, never an argument
    if mode == MODERN:  # what the 2026-07-28 result shape requires (the SDK client validated it too)
        assert refused.result_type == "complete"


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_http_bearer_token(server, mode):
    async def run():
        async with http_client(server.url, mode, server.tokens["kite"]) as client:
            await check_session(client, mode, "kite", "http")

    anyio.run(run)


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_http_secret_path(server, mode):
    async def run():
        async with http_client(server.secret_url, mode) as client:
            await check_session(client, mode, "wren", "http")

    anyio.run(run)


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_stdio_through_the_running_owner(server, mode):
    async def run():
        async with stdio_session(server.home, mode) as client:
            await check_session(client, mode, "kite", "stdio")

    anyio.run(run)
    assert "this stdio session owns" not in (server.home / "stdio.log").read_text()  # the server answered it


@pytest.mark.parametrize("mode", ["legacy", MODERN])
def test_stdio_as_the_owner(lone_home, mode):
    async def run():
        async with stdio_session(lone_home, mode) as client:
            await check_session(client, mode, "kite", "stdio")

    anyio.run(run)


def test_auto_lands_on_2026_07_28(server, lone_home):
    async def run():
        async with http_client(server.url, "auto", server.tokens["kite"]) as client:
            assert client.protocol_version == MODERN
        async with stdio_session(lone_home, "auto") as client:
            assert client.protocol_version == MODERN
            assert tool_result(await client.call_tool("persmem_whoami", {}))["agent"] == "kite"

    anyio.run(run)


def modern_post(server, body, headers=None, token="kite"):
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN, "Mcp-Method": body["method"]}
    if token:
        base["Authorization"] = f"Bearer {server.tokens[token]}"
    return httpx2.post(server.url, json=body, headers=base | (headers or {}), timeout=30)


def tools_call(name, arguments):
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": name, "arguments": arguments, "_meta": ENVELOPE}}


def test_raw_2026_request_is_answered_without_a_session(server):
    response = modern_post(server, tools_call("persmem_whoami", {}), {"Mcp-Name": "persmem_whoami"})
    assert response.status_code == 200 and "mcp-session-id" not in response.headers
    answer = response.json()
    assert answer["id"] == 7 and answer["result"]["resultType"] == "complete"
    assert json.loads(answer["result"]["content"][0]["text"])["agent"] == "kite"
    discover = modern_post(server, {"jsonrpc": "2.0", "id": 8, "method": "server/discover",
                                    "params": {"_meta": ENVELOPE}})
    assert discover.status_code == 200 and "mcp-session-id" not in discover.headers
    assert MODERN in discover.json()["result"]["supportedVersions"]
    # the era changes nothing about who may call: no credential, no answer
    anonymous = modern_post(server, tools_call("persmem_whoami", {}), {"Mcp-Name": "persmem_whoami"}, token=None)
    assert anonymous.status_code == 401


def test_mismatching_routing_header_is_refused_before_the_call_runs(server):
    send = tools_call("amq_send", {"to_agent": "wren", "body": "must not arrive"})
    wrong_method = modern_post(server, send, {"Mcp-Method": "tools/list", "Mcp-Name": "amq_send"})
    wrong_name = modern_post(server, send, {"Mcp-Name": "amq_read"})
    for response, header in ((wrong_method, "mcp-method"), (wrong_name, "mcp-name")):
        assert response.status_code == 400 and "mcp-session-id" not in response.headers
        error = response.json()["error"]
        assert error["code"] == -32020 and header in error["message"] and "does not match" in error["message"]

    async def wren_inbox():
        async with http_client(server.secret_url, MODERN) as client:
            return tool_result(await client.call_tool("amq_check", {}))

    assert anyio.run(wren_inbox)["new_count"] == 0  # nothing was sent


def stdio_lines(home, lines, timeout=30.0):
    """Feed JSON-RPC lines to `persmem serve --transport stdio` and close its stdin: every line it wrote, once it
    has ended (within `timeout` seconds)."""
    process = subprocess.Popen(persmem_command("serve", "--transport", "stdio", "--agent", "kite"), env=era_env(home),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out, _ = process.communicate("".join(json.dumps(line) + "\n" for line in lines).encode(), timeout=timeout)
    assert process.returncode == 0
    return [json.loads(line) for line in out.splitlines()]


def test_stdio_first_request_decides_the_era(lone_home):
    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": ENVELOPE}}
    initialize = {"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    no_envelope = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}
    old_in_envelope = {"jsonrpc": "2.0", "id": 4, "method": "tools/list",
                       "params": {"_meta": ENVELOPE | {"io.modelcontextprotocol/protocolVersion": "2025-06-18"}}}
    modern = {answer["id"]: answer for answer in stdio_lines(lone_home, [discover, initialize, no_envelope,
                                                                         old_in_envelope])}
    assert modern[1]["result"]["supportedVersions"] == [MODERN]
    assert modern[2]["error"]["code"] == -32022 and modern[2]["error"]["data"]["supported"] == [MODERN]
    assert "initialize handshake is not accepted" in modern[2]["error"]["message"]
    assert modern[3]["error"]["code"] == -32602 and "_meta" in modern[3]["error"]["message"]
    assert modern[4]["error"]["code"] == -32022 and modern[4]["error"]["data"]["requested"] == "2025-06-18"

    enveloped = {"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    legacy = {answer["id"]: answer for answer in stdio_lines(lone_home, [initialize, enveloped])}
    assert legacy[2]["result"]["protocolVersion"] == "2025-11-25"
    assert legacy[5]["error"]["code"] == -32600 and "start a new session" in legacy[5]["error"]["message"]


def test_stdio_listen_stream_with_the_sdk_client(lone_home):
    """A 2026-07-28 `subscriptions/listen` over stdio is acknowledged (its stream's notifications reach the
    client) and calls run beside the open stream."""
    async def run():
        async with stdio_session(lone_home, MODERN) as client:
            async with client.listen(tools_list_changed=True) as subscription:
                assert subscription.honored.tools_list_changed
                assert tool_result(await client.call_tool("persmem_whoami", {}))["agent"] == "kite"

    anyio.run(run)


def test_stdio_session_ends_when_the_client_leaves_with_a_listen_stream_open(lone_home):
    listen = {"jsonrpc": "2.0", "id": "sub", "method": "subscriptions/listen",
              "params": {"notifications": {"toolsListChanged": True}, "_meta": ENVELOPE}}
    started = time.monotonic()
    lines = stdio_lines(lone_home, [listen, tools_call("persmem_whoami", {})], timeout=20)
    assert time.monotonic() - started < 15  # it did not wait for the stream (which never ends by itself)
    answers = {line["id"]: line for line in lines if "id" in line}
    assert list(answers) == [7] and "kite" in answers[7]["result"]["content"][0]["text"]  # the call still finished
    # whether the stream's acknowledgment came before the client left is a race; it is all the stream may carry
    assert all(line["method"] == "notifications/subscriptions/acknowledged" for line in lines if "id" not in line)


def test_an_open_listen_stream_does_not_hold_up_a_handover(tmp_path):
    """`persmem serve` takes the home from a stdio owner whose client listens: the stream ends at once (the
    client is told to listen again) instead of after the owner's graceful timeout, and calls go on."""
    home = tmp_path / "home"
    AgentStore(home).add("kite")
    servers = []

    async def run():
        async with stdio_session(home, MODERN) as client:
            async with client.listen(tools_list_changed=True) as subscription:
                started = time.monotonic()
                servers.append(await anyio.to_thread.run_sync(lambda: start_server(home, env=era_env(home))))
                took = time.monotonic() - started
                with pytest.raises(SubscriptionLost, match="re-listen"):
                    async for _ in subscription:
                        pass
            assert tool_result(await client.call_tool("persmem_whoami", {}))["agent"] == "kite"
        return took

    try:
        took = anyio.run(run)
    finally:
        for server in servers:
            server.stop()
    log = (home / "stdio.log").read_text()
    assert "graceful shutdown exceeded" not in log and "without completing response" not in log, log[-2000:]
    assert took < 10

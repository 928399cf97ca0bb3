"""Streamable HTTP transport: agents, tokens, secret paths, DNS rebinding, body limits, logs.

Each case of the transport part of ../shared/docs/security.md is a test here,
against a real `persmem serve` process and a real MCP client.
"""

import subprocess

import anyio
import httpx2

from persmem_core.auth.agents import AgentStore
from persmem_core.testing import MCP_HEADERS, MCP_INITIALIZE as INIT
from persmem_core.transport.server_process import persmem_command
from persmem_core.transport.tool_answers import tool_result



def post(server, headers=None, body=INIT, path="/mcp", **kw):
    return httpx2.post(server.base_url + path, headers={**MCP_HEADERS, **(headers or {})}, json=body, timeout=10, **kw)


def test_whoami_over_http_is_the_token_agent(persmem_server):
    server = persmem_server(agents=["kite", "wren"])
    assert server.call_tool("persmem_whoami", agent="kite")["agent"] == "kite"
    who = server.call_tool("persmem_whoami", agent="wren")
    assert who["agent"] == "wren" and who["transport"] == "http"


def test_missing_wrong_and_revoked_tokens_get_the_same_401(persmem_server):
    server = persmem_server(agents=["kite"])
    no_token = post(server)
    wrong = post(server, {"Authorization": "Bearer pm_not-a-real-token"})
    basic = post(server, {"Authorization": "Basic a2l0ZTp4"})
    assert no_token.status_code == wrong.status_code == basic.status_code == 401
    assert no_token.json() == wrong.json() == basic.json()
    assert "kite" not in no_token.text + wrong.text
    assert post(server, server.headers("kite")).status_code == 200
    AgentStore(server.home).revoke("kite")
    revoked = post(server, server.headers("kite"))
    assert revoked.status_code == 401 and revoked.json() == no_token.json()


def test_token_in_query_string_is_refused(persmem_server):
    server = persmem_server(agents=["kite"])
    response = post(server, path=f"/mcp?token={server.tokens['kite']}")
    assert response.status_code == 401 and "query" in response.json()["message"]
    assert server.tokens["kite"] not in server.log()


def test_dns_rebinding_host_and_origin_checks(persmem_server):
    server = persmem_server(agents=["kite"])
    auth = server.headers("kite")
    assert post(server, {**auth, "Host": "evil.example"}).status_code == 421
    assert post(server, {**auth, "Origin": "https://evil.example"}).status_code == 403
    assert post(server, {**auth, "Origin": f"http://127.0.0.1:{server.port}"}).status_code == 200


def test_public_host_is_allowed_when_configured(persmem_server):
    server = persmem_server(agents=["kite"], config={"server": {"public_url": "https://mcp.example.com"}})
    ok = post(server, {**server.headers("kite"), "Host": "mcp.example.com", "Origin": "https://mcp.example.com"})
    assert ok.status_code == 200
    assert post(server, {**server.headers("kite"), "Host": "other.example.com"}).status_code == 421


def test_oversized_body_is_refused_before_parsing(persmem_server):
    server = persmem_server(agents=["kite"], config={"server": {"max_body_bytes": 65536}})
    big = {**INIT, "params": {**INIT["params"], "pad": "x" * 100_000}}
    assert post(server, server.headers("kite"), body=big).status_code == 413
    assert post(server, server.headers("kite")).status_code == 200


def test_session_of_one_agent_is_refused_to_another(persmem_server):
    server = persmem_server(agents=["kite", "wren"])
    opened = post(server, server.headers("kite"))
    session_id = opened.headers["mcp-session-id"]
    notify = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    same = post(server, {**server.headers("kite"), "mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}, body=notify)
    assert same.status_code == 202
    other = post(server, {**server.headers("wren"), "mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}, body=notify)
    assert other.status_code == 404


def test_secret_path_authenticates_clients_that_cannot_send_headers(persmem_server):
    server = persmem_server(agents=[])
    issued = AgentStore(server.home).add("wren", token=False, secret_path=True)

    async def call():
        async with server.client(None, url=f"{server.base_url}/{issued.secret_path}/mcp") as client:
            return tool_result(await client.call_tool("persmem_whoami", {}))

    assert anyio.run(call)["agent"] == "wren"
    assert post(server, path="/not-the-secret-but-long-enough-to-look-like-one-xxxx/mcp").status_code == 401
    assert issued.secret_path not in server.log()
    assert "/<secret>/mcp" in server.log()


def test_secrets_never_reach_the_log_or_the_registry(persmem_server):
    server = persmem_server(agents=["kite"])
    server.call_tool("persmem_whoami", agent="kite")
    post(server, {"Authorization": "Bearer pm_wrong-token-value"})
    registry = (server.home / "agents.json").read_text()
    for secret in (server.tokens["kite"], "pm_wrong-token-value"):
        assert secret not in server.log()
        assert secret not in registry
    assert oct((server.home / "agents.json").stat().st_mode & 0o777) == "0o600"


def test_anonymous_loopback_only_while_no_agent_has_credentials(persmem_server):
    server = persmem_server(agents=[])
    assert server.call_tool("persmem_whoami")["agent"] == "local"
    token = AgentStore(server.home).add("kite").token
    assert post(server).status_code == 401
    assert post(server, {"Authorization": f"Bearer {token}"}).status_code == 200


def test_non_loopback_bind_without_auth_refuses_to_start(persmem_env):
    result = subprocess.run(
        persmem_command("serve", "--host", "0.0.0.0", "--port", "0"),
        env=persmem_env(), capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 1
    assert "refusing to listen" in result.stderr and "persmem agent add" in result.stderr


def test_healthz_is_open_and_reveals_nothing(persmem_server):
    server = persmem_server(agents=["kite"])
    response = httpx2.get(server.base_url + "/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_two_clients_at_once(persmem_server):
    server = persmem_server(agents=["kite", "wren"])

    async def many():
        results = []

        async def one(agent):
            async with server.client(agent) as client:
                for _ in range(5):
                    results.append((agent, tool_result(await client.call_tool("persmem_whoami", {}))["agent"]))

        async with anyio.create_task_group() as tg:
            for agent in ("kite", "wren", "kite", "wren"):
                tg.start_soon(one, agent)
        return results

    results = anyio.run(many)
    assert len(results) == 20 and all(a == b for a, b in results)

"""`persmem dashboard` serves the dashboard alone (no MCP), on its own port."""

import subprocess
import sys
import time

import httpx2

from persmem_core.sdk import AgentStore
from persmem_core.sdk.testing import clean_env, free_port
from persmem_dashboard.app import SECURITY_HEADERS


def test_persmem_dashboard_serves_alone(tmp_path):
    home = tmp_path / "home"
    token = AgentStore(home).add("kite").token
    port = free_port()
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS="memory_hnsw,shell,git,searxng")
    proc = subprocess.Popen([sys.executable, "-m", "persmem_core", "dashboard", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                login = httpx2.get(f"{base}/login", timeout=2)
                break
            except httpx2.HTTPError:
                assert time.monotonic() < deadline and proc.poll() is None, proc.stdout.read() if proc.poll() else ""
                time.sleep(0.2)
        assert login.status_code == 200 and "Log in" in login.text
        no_mcp = httpx2.get(f"{base}/mcp", timeout=5)
        assert no_mcp.status_code == 404  # no MCP here, and its 404 still carries the dashboard's headers
        assert all(no_mcp.headers[name] == value for name, value in SECURITY_HEADERS.items())
        with httpx2.Client(base_url=base, timeout=10) as client:
            page = client.get("/login")
            csrf = page.text.split('name="_csrf_token" value="', 1)[1].split('"', 1)[0]
            assert client.post("/login", data={"token": token, "_csrf_token": csrf}).status_code in (302, 303)
            assert "Mail" in client.get("/mail").text
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_persmem_dashboard_owns_the_home_a_stdio_session_joins_it_and_a_serve_beside_it_is_one_line(tmp_path):
    """It opens the plugins' stores, so it owns the home like a server: a stdio session started while it runs
    uses it (mail sent over stdio is in the dashboard's process), a `persmem serve` beside it says who holds the
    home, and Ctrl-C stops it with exit 0."""
    import json
    import signal

    from persmem_core.sdk import socket_path

    home = tmp_path / "home"
    AgentStore(home).add("kite")
    AgentStore(home).add("wren")
    port = free_port()
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS="memory_hnsw,shell,git,searxng")
    proc = subprocess.Popen([sys.executable, "-m", "persmem_core", "dashboard", "--port", str(port)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not socket_path(home).exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.1)
        lines = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "amq_send", "arguments": {"to_agent": "wren", "body": "via stdio"}}},
        ]
        stdio = subprocess.run([sys.executable, "-m", "persmem_core", "serve", "--transport", "stdio", "--agent",
                                "kite"], env=env, input="".join(json.dumps(m) + "\n" for m in lines),
                               capture_output=True, text=True, timeout=60)
        answers = {a["id"]: a for a in map(json.loads, stdio.stdout.splitlines())}
        assert "delivered" in answers[2]["result"]["content"][0]["text"], stdio.stdout + stdio.stderr
        assert "owns" not in stdio.stderr  # it joined the dashboard's process; it never owned the home
        serve = subprocess.run([sys.executable, "-m", "persmem_core", "serve", "--port", "0"], env=env,
                               capture_output=True, text=True, timeout=60)
        assert serve.returncode == 1 and "`persmem dashboard` is already serving" in serve.stderr
        assert f"pid {proc.pid}" in serve.stderr and "Traceback" not in serve.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 0
    assert not socket_path(home).exists()

"""`persmem dashboard` serves the dashboard alone (no MCP), on its own port."""

import subprocess
import sys
import time

import httpx2

from persmem_core.agents import AgentStore
from persmem_core.testing import clean_env, free_port
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

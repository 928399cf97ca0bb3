"""`persmem doctor` run beside a server: the port held by this home's own healthy server is a PASS naming its pid;
held by anything else (another home's persmem, any process) it is the "is persmem already running?" warning."""

from __future__ import annotations

import subprocess
import sys

from persmem_core.auth.agents import AgentStore
from persmem_core.net.addresses import free_port
from persmem_core.testing import clean_env, write_config
from persmem_core.transport.server_process import RunningServer


def doctor(env: dict) -> str:
    result = subprocess.run([sys.executable, "-m", "persmem_core", "doctor"], env=env, capture_output=True,
                            text=True, timeout=120)
    return result.stdout + result.stderr


def test_doctor_knows_its_own_running_server_and_warns_about_another(tmp_path):
    home, other = tmp_path / "home", tmp_path / "other"
    port = free_port()
    write_config(home, {"server": {"port": port}})
    write_config(other, {"server": {"port": port}})
    server = RunningServer(home, clean_env(home), port, {"kite": AgentStore(home).add("kite").token}).start()
    try:
        pid = server.process.pid
        mine = doctor(clean_env(home))
        assert f"PASS  server port: persmem server running and healthy on 127.0.0.1:{port} (pid {pid})" in mine, mine
        assert "already running" not in mine
        # another home configured for the same port: that server is not its own, so the warning stands
        theirs = doctor(clean_env(other))
        assert f"WARN  port free: 127.0.0.1:{port} is in use (is persmem already running?)" in theirs, theirs
    finally:
        server.stop()
    assert f"PASS  port free: 127.0.0.1:{port}" in doctor(clean_env(home))  # stopped: free again

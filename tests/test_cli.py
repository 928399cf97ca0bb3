"""The `persmem` command as a user runs it: agents, doctor, connect, backup, version."""

import json
import socket

from persmem_core.auth.agents import AgentStore


def test_version_and_help(run_cli, persmem_env):
    assert run_cli("--version", env=persmem_env()).stdout.strip() == "persmem, version 0.1.0"
    help_text = run_cli("--help", env=persmem_env()).stdout
    for command in ("serve", "plugins", "doctor", "config", "agent", "connect", "backup", "plugin"):
        assert command in help_text


def test_agent_add_prints_token_once_and_stores_only_a_hash(run_cli, persmem_env, tmp_path):
    env = persmem_env()
    added = run_cli("agent", "add", "kite", "--secret-path", env=env)
    assert added.returncode == 0, added.stderr
    token = next(line.split()[1] for line in added.stdout.splitlines() if line.startswith("token:"))
    path_line = next(line for line in added.stdout.splitlines() if line.startswith("secret path:"))
    assert token.startswith("pm_") and path_line.endswith("/mcp")
    registry = (tmp_path / "home" / "agents.json").read_text()
    assert token not in registry and path_line.split("/")[1] not in registry
    assert AgentStore(tmp_path / "home").agent_for_token(token) == "kite"

    again = run_cli("agent", "add", "kite", env=env)
    assert again.returncode == 1 and "--rotate" in again.stderr
    rotated = run_cli("agent", "add", "kite", "--rotate", env=env)
    assert rotated.returncode == 0
    assert AgentStore(tmp_path / "home").agent_for_token(token) is None

    listed = run_cli("agent", "list", env=env).stdout
    assert "kite" in listed and "token" in listed
    assert run_cli("agent", "revoke", "kite", env=env).returncode == 0
    assert "revoked" in run_cli("agent", "list", env=env).stdout
    missing = run_cli("agent", "revoke", "nobody", env=env)
    assert missing.returncode == 1 and "no active agent" in missing.stderr


def test_agent_names_are_validated(run_cli, persmem_env):
    for bad in ("../x", "Kite", "", "a" * 40, "ki te", "kite\n"):  # a name ending in a line break too
        result = run_cli("agent", "add", bad, env=persmem_env())
        assert result.returncode != 0 and "Traceback" not in result.stderr


def test_doctor_prints_one_line_per_check(run_cli, sample_env):
    result = run_cli("doctor", env=sample_env("sample_echo,sample_broken"))
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0, result.stdout + result.stderr
    assert all(line.split()[0] in ("PASS", "WARN", "FAIL") for line in lines[:-1])
    text = result.stdout
    assert "PASS  config valid" in text and "PASS  data dir writable" in text and "port free" in text
    assert "PASS  echo plugin" in text
    assert "WARN  plugin sample_broken" in text
    assert "WARN  agents" in text  # no credentials yet


def test_doctor_fails_on_bad_config_and_warns_on_busy_port(run_cli, persmem_env, tmp_path):
    env = persmem_env()
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "persmem.toml").write_text("[server]\nport = -1\n")
    result = run_cli("doctor", env=env)
    assert result.returncode == 1 and "FAIL  config valid" in result.stdout
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        (tmp_path / "home" / "persmem.toml").write_text(f"[server]\nport = {port}\n")
        assert "WARN  port free" in run_cli("doctor", env=env).stdout


def test_doctor_says_whether_remote_clients_can_sign_in_with_oauth(run_cli, persmem_env, tmp_path):
    env = persmem_env()
    config = tmp_path / "home" / "persmem.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    for public_url, why in (("https://mcp.example.com/persmem", "has a path"), ("http://10.0.0.5:8765", "is plain http")):
        config.write_text(f'[server]\npublic_url = "{public_url}"\n')
        assert f"WARN  oauth: off: [server] public_url '{public_url}' {why}" in run_cli("doctor", env=env).stdout
    config.write_text('[server]\npublic_url = "https://mcp.example.com"\n')
    assert "WARN  oauth: remote clients" in run_cli("doctor", env=env).stdout  # nobody can approve yet
    set_password = run_cli("oauth", "password", env=env, input="correct horse battery\n")
    assert set_password.returncode == 0, set_password.stderr
    doctor = run_cli("doctor", env=env).stdout
    assert "PASS  oauth: remote clients (claude.ai connectors) sign in at https://mcp.example.com" in doctor
    config.write_text("[oauth]\nenabled = false\n")
    assert "PASS  oauth: off ([oauth] enabled = false)" in run_cli("doctor", env=env).stdout


def test_connect_prints_setup_for_every_client(run_cli, persmem_env):
    env = persmem_env()
    run_cli("agent", "add", "kite", env=env)
    out = run_cli("connect", "kite", "--url", "https://mcp.example.com", env=env).stdout
    assert "claude mcp add --transport http persmem https://mcp.example.com/mcp" in out
    assert "[mcp_servers.persmem]" in out and "Claude Desktop" in out and "mcpServers" in out
    assert "kite has no secret path yet" in out and "agent secret-path kite" in out
    rotated = run_cli("connect", "kite", "--rotate", env=env).stdout
    token = rotated.split("Bearer ")[1].split("'")[0]
    assert token.startswith("pm_") and AgentStore(env["PERSMEM_HOME"]).agent_for_token(token) == "kite"


def test_backup_collects_every_plugin_and_refuses_to_overwrite(run_cli, sample_env, tmp_path):
    env = sample_env()
    run_cli("agent", "add", "kite", env=env)
    dest = tmp_path / "backup-1"
    result = run_cli("backup", str(dest), env=env)
    assert result.returncode == 0, result.stderr
    manifest = json.loads((dest / "MANIFEST.json").read_text())
    assert "sample_echo" in manifest["backed_up"]
    assert (dest / "sample_echo" / "echo.txt").read_text() == "echo"
    assert (dest / "core" / "agents.json").exists()
    again = run_cli("backup", str(dest), env=env)
    assert again.returncode == 1 and "already exists" in again.stderr


def test_failed_backup_leaves_nothing_that_looks_complete(run_cli, sample_env, tmp_path):
    dest = tmp_path / "backup-2"
    result = run_cli("backup", str(dest), env=sample_env("sample_echo,sample_bad_backup"))
    assert result.returncode == 1 and "disk full" in result.stderr
    assert not dest.exists() and not dest.with_name("backup-2.partial").exists()

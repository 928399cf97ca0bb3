"""`persmem oauth clients|revoke|password|approve-code`, `persmem agent revoke` ending OAuth grants, and backup +
restore carrying oauth.json: the real commands as subprocesses, checked against the store a server would read."""

from __future__ import annotations

import re
import subprocess

import pytest

from persmem_core.auth.agents import AgentStore
from persmem_core.auth.oauth.records import ClientRecord
from persmem_core.auth.oauth.store import OAuthStore
from persmem_core.settings import OAuthConfig
from persmem_core.testing import clean_env
from persmem_core.transport.server_process import persmem_command

RESOURCE = "http://127.0.0.1:8765/mcp"
NO_PLUGINS = "memory_hnsw,amq_maildir,shell,git,searxng,dashboard,sessions"


def persmem(home, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(persmem_command(*args), env=clean_env(home, PERSMEM_DISABLE_PLUGINS=NO_PLUGINS),
                          input=stdin, capture_output=True, text=True, timeout=60)


def store_of(home) -> OAuthStore:
    """The store as a running server holds it (another process than the CLI's)."""
    return OAuthStore(home, AgentStore(home), lambda: OAuthConfig())


def grant(store: OAuthStore, agent: str, client_id: str, client_name: str):
    code = store.issue_code(client_id=client_id, client_name=client_name, redirect_uri="https://claude.ai/api/cb",
                            redirect_uri_explicit=True, code_challenge="x" * 43, resource=RESOURCE, scopes=[],
                            agent=agent)
    return store.exchange_code(code, client_id)


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    AgentStore(home).add("kite")
    AgentStore(home).add("wren")
    return home


def test_password_from_stdin_and_generated(home):
    result = persmem(home, "oauth", "password", stdin="short\n")
    assert result.returncode == 1 and "at least 12 characters" in result.stderr and "Traceback" not in result.stderr
    assert not store_of(home).has_operator_credential()

    result = persmem(home, "oauth", "password", stdin="correct horse battery staple\n")
    assert result.returncode == 0, result.stderr
    assert "operator passphrase set" in result.stdout and "correct horse" not in result.stdout
    store = store_of(home)
    assert store.check_operator("correct horse battery staple")
    assert not store.check_operator("correct horse battery")

    result = persmem(home, "oauth", "password", "--generate")
    assert result.returncode == 0, result.stderr
    generated = re.search(r"operator passphrase: (\S+)", result.stdout).group(1)
    assert len(generated) >= 16 and store.check_operator(generated)
    assert not store.check_operator("correct horse battery staple")  # replaced
    assert generated not in (home / "oauth.json").read_text()


def test_approve_code_works_once(home):
    result = persmem(home, "oauth", "approve-code", "--minutes", "3")
    assert result.returncode == 0, result.stderr
    code = re.search(r"approval code: ([A-Z2-7]{4}-[A-Z2-7]{4}-[A-Z2-7]{4})", result.stdout).group(1)
    assert "3 minute" in result.stdout
    store = store_of(home)
    assert store.has_operator_credential()
    assert store.check_operator(code)
    assert not store.check_operator(code)
    result = persmem(home, "oauth", "approve-code", "--minutes", "0")
    assert result.returncode == 2 and "--minutes" in result.stderr


def test_clients_lists_grants_and_revoke_ends_them(home):
    result = persmem(home, "oauth", "clients")
    assert result.returncode == 0 and "no OAuth clients yet" in result.stdout
    store = store_of(home)
    claude = grant(store, "kite", "https://claude.ai/oauth/mcp-oauth-client-metadata", "Claude")
    desktop = grant(store, "wren", "dcr-desktop", "Claude Desktop")
    store.register_client(ClientRecord(client_id="dcr-idle", client_name="Idle app"))

    result = persmem(home, "oauth", "clients")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CLIENT", "CLIENT", "ID", "AGENT", "STATE", "CREATED", "LAST", "REFRESHED", "GRANT"]
    row = next(line for line in lines if claude.grant_id in line)
    assert "Claude" in row and "https://claude.ai/oauth/mcp-oauth-client-metadata" in row and " kite " in row
    assert " active " in row
    assert any("Idle app" in line and "no grant yet" in line for line in lines)
    assert "oauth revoke GRANT" in lines[-1]

    result = persmem(home, "oauth", "revoke", claude.grant_id)
    assert result.returncode == 0, result.stderr
    assert f"grant {claude.grant_id} ended: Claude acting as kite" in result.stdout
    assert store.agent_for_access_token(claude.access_token, RESOURCE) is None  # the server's store, at once
    assert store.agent_for_access_token(desktop.access_token, RESOURCE) == "wren"

    result = persmem(home, "oauth", "revoke", "dcr-desktop")  # a client id ends all its grants
    assert result.returncode == 0 and desktop.grant_id in result.stdout
    assert store.agent_for_access_token(desktop.access_token, RESOURCE) is None
    assert "revoked (operator)" in persmem(home, "oauth", "clients").stdout

    result = persmem(home, "oauth", "revoke", "g_0000000000000000")
    assert result.returncode == 1 and "oauth clients" in result.stderr and "Traceback" not in result.stderr


def test_agent_revoke_ends_its_oauth_grants(home):
    store = store_of(home)
    kite, wren = grant(store, "kite", "c1", "One"), grant(store, "wren", "c2", "Two")
    result = persmem(home, "agent", "revoke", "kite")
    assert result.returncode == 0, result.stderr
    assert "agent kite: credentials revoked, 1 OAuth grant(s) ended" in result.stdout
    assert store.agent_for_access_token(kite.access_token, RESOURCE) is None
    assert store.agent_for_access_token(wren.access_token, RESOURCE) == "wren"
    assert "revoked (agent revoked)" in persmem(home, "oauth", "clients").stdout


def test_backup_and_restore_carry_oauth_json(home, tmp_path):
    store = store_of(home)
    tokens = grant(store, "kite", "c1", "Claude")
    store.set_operator_password("correct horse battery staple")
    result = persmem(home, "backup", str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "b" / "core" / "oauth.json").read_bytes() == (home / "oauth.json").read_bytes()

    restored = tmp_path / "restored"
    result = persmem(restored, "restore", str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr
    assert "1 OAuth grant(s)" in result.stdout
    again = store_of(restored)
    assert again.agent_for_access_token(tokens.access_token, RESOURCE) == "kite"  # the connector keeps working
    assert again.check_operator("correct horse battery staple")
    assert again.refresh(tokens.refresh_token, "c1").grant_id == tokens.grant_id

"""The real Claude Code and Codex CLIs (pinned in tests/clients/package-lock.json, installed by tests/run.sh)
against a real persmem server, with a scripted loopback stand-in for the model APIs (tests/clients/model_api.py):
what the model would have received is asserted on. `persmem hooks install` puts the hooks into the temp config
folders (Codex's then trusted with persmem_sessions.codex_trust); the persmem MCP server is reached over HTTP with
the agent's token. Each test takes ~10-15 s here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from persmem_core.sdk.testing import clean_env, start_server

sys.path.insert(0, str(Path(__file__).parent / "clients"))
from model_api import ModelApi  # noqa: E402

CLIENTS = Path(__file__).parent / "clients" / "node_modules" / ".bin"
CLAUDE = CLIENTS / "claude"
PERSMEM = Path(sys.executable).parent / "persmem"
PINNED = "Deploys to production go through ops/release.sh and need a second reviewer."
RECALLED = "The staging database password rotates every Monday at 09:00 UTC."

needs_claude = pytest.mark.skipif(not CLAUDE.exists(), reason="tests/clients not installed: npm ci --prefix tests/clients")


def texts(value) -> str:
    return json.dumps(value)


@pytest.fixture
def machine(tmp_path):
    home = tmp_path / "me"
    claude_dir, codex_dir = home / ".claude", home / ".codex"
    for folder in (claude_dir, codex_dir):
        folder.mkdir(parents=True)
    persmem_home = tmp_path / "persmem-home"
    env = clean_env(persmem_home, HOME=str(home), CLAUDE_CONFIG_DIR=str(claude_dir), CODEX_HOME=str(codex_dir))
    server = start_server(persmem_home, ("kite",), env)
    try:
        yield type("Machine", (), {"home": home, "claude": claude_dir, "codex": codex_dir, "env": env,
                                   "server": server, "work": tmp_path})
    finally:
        server.stop()


def run_claude(machine, api: ModelApi, prompt: str) -> dict:
    mcp = {"mcpServers": {"persmem": {"type": "http", "url": machine.server.url,
                                      "headers": machine.server.headers("kite")}}}
    env = machine.env | {"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "sk-ant-test",
                         "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1",
                         "DISABLE_TELEMETRY": "1", "DISABLE_ERROR_REPORTING": "1"}
    done = subprocess.run([str(CLAUDE), "-p", prompt, "--output-format", "json", "--mcp-config", json.dumps(mcp),
                           "--allowedTools", "mcp__persmem__*", "--model", "claude-sonnet-4-5"],
                          env=env, cwd=machine.work, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, (done.stdout, done.stderr)
    return json.loads(done.stdout)


@needs_claude
def test_claude_code_gets_the_briefing_the_mcp_tools_and_recall_and_is_captured(machine):
    started = time.monotonic()
    server = machine.server
    server.call_tool("memory_store", {"content": PINNED, "memory_type": "directive"}, agent="kite")
    done = subprocess.run([str(PERSMEM), "hooks", "install", "--target", "claude", "--agent", "kite"],
                          env=machine.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with ModelApi([{"tool": "mcp__persmem__memory_store", "input": {"content": RECALLED}}, "Stored it."]) as api:
        first = run_claude(machine, api, "Remember when the staging password rotates.")
        turns = api.turns("/v1/messages")
        assert PINNED in texts(turns[0]), "the SessionStart briefing is not in the first request"
        assert len(turns) >= 2, turns
        results = [block for message in turns[1]["messages"] if isinstance(message.get("content"), list)
                   for block in message["content"] if block.get("type") == "tool_result"]
        assert len(results) == 1 and not results[0].get("is_error"), results
        stored = server.call_tool("memory_search", {"query": "staging password rotation"}, agent="kite")
        assert RECALLED in texts(stored), "the scripted memory_store call did not reach persmem"
        assert '\\"status\\": \\"stored\\"' in texts(results[0]["content"]), results
        assert first["session_id"]
        api.script(["The password rotates on Mondays."])
        run_claude(machine, api, "When does the staging database password rotate?")
        second = api.turns("/v1/messages")[len(turns)]
        assert RECALLED in texts(second["messages"]), "the UserPromptSubmit recall is not in the second session's request"
    listed = server.call_tool("session_list", {}, agent="kite")
    assert first["session_id"] in texts(listed), listed
    print(f"claude code test: {time.monotonic() - started:.1f} s")


CODEX = CLIENTS / "codex"
needs_codex = pytest.mark.skipif(not CODEX.exists(), reason="tests/clients not installed: npm ci --prefix tests/clients")


def codex_config(machine, api: ModelApi) -> None:
    """A model provider pointing at the stand-in and the persmem MCP server over HTTP, after persmem's own
    lines (hooks install wrote [features])."""
    path = machine.codex / "config.toml"
    lines = ['model = "gpt-5"\nmodel_provider = "standin"\n',
             "[model_providers.standin]", 'name = "standin"', f'base_url = "{api.url}/v1"', 'wire_api = "responses"',
             'env_key = "STANDIN_API_KEY"', "", "[mcp_servers.persmem]", f'url = "{machine.server.url}"',
             'bearer_token_env_var = "PERSMEM_TEST_TOKEN"', ""]
    path.write_text("\n".join(lines) + "\n" + path.read_text())


def run_codex(machine, api: ModelApi, prompt: str) -> subprocess.CompletedProcess:
    env = machine.env | {"STANDIN_API_KEY": "sk-test", "PERSMEM_TEST_TOKEN": machine.server.tokens["kite"]}
    done = subprocess.run([str(CODEX), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
                           "--json", prompt], env=env, cwd=machine.work, capture_output=True, text=True, timeout=90,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    return done


def thread_id(done: subprocess.CompletedProcess) -> str:
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return next(event["thread_id"] for event in events if event.get("type") == "thread.started")


@needs_codex
def test_codex_trusted_hooks_bring_the_briefing_and_the_mcp_tools_answer_and_the_session_is_captured(machine):
    """Untrusted, Codex skips persmem's hooks (no briefing); codex_trust trusts them through `codex app-server`,
    after which `codex exec` gets the briefing as a developer message, the MCP tool's result, the recall, and
    the session is captured."""
    from persmem_sessions import codex_trust

    started = time.monotonic()
    server = machine.server
    server.call_tool("memory_store", {"content": PINNED, "memory_type": "directive"}, agent="kite")
    environ = machine.env | {"PERSMEM_CODEX_BIN": str(CODEX)}
    done = subprocess.run([str(PERSMEM), "hooks", "install", "--target", "codex", "--agent", "kite",
                           "--no-codex-trust"], env=environ, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with ModelApi(["Hello."]) as api:
        codex_config(machine, api)
        run_codex(machine, api, "Say hello.")
        assert PINNED not in texts(api.turns("/v1/responses")[0]["input"]), "an untrusted hook ran"
        assert len(codex_trust.untrusted_hooks(machine.codex, environ)) == 5
        [check] = codex_trust.doctor_checks(environ)
        assert check.status == "WARN" and "sessionStart (untrusted)" in check.detail, check
        trusted = subprocess.run([str(PERSMEM), "hooks", "install", "--target", "codex", "--agent", "kite"],
                                 env=environ, capture_output=True, text=True, timeout=60)
        assert trusted.returncode == 0 and "only after it is trusted" in trusted.stdout, trusted.stderr
        assert "trusted persmem's Codex hooks" in trusted.stdout, trusted.stdout
        assert codex_trust.untrusted_hooks(machine.codex, environ) == []
        assert [check.status for check in codex_trust.doctor_checks(environ)] == ["PASS"]
        assert "already trusts" in codex_trust.trust_our_hooks(machine.codex, environ)[0]

        api.requests.clear()
        api.script([{"namespace": "mcp__persmem", "tool": "memory_store", "input": {"content": RECALLED}},
                    "Stored it."])
        first = thread_id(run_codex(machine, api, "Remember when the staging password rotates."))
        turns = api.turns("/v1/responses")
        briefing = [item for item in turns[0]["input"] if item.get("role") == "developer" and PINNED in texts(item)]
        assert briefing, "the SessionStart briefing is not a developer message of the first request"
        outputs = [item for item in turns[1]["input"] if item.get("type") == "function_call_output"]
        assert len(outputs) == 1 and '\\"status\\": \\"stored\\"' in texts(outputs[0]["output"]), outputs

        api.script(["On Mondays."])
        run_codex(machine, api, "When does the staging database password rotate?")
        second = api.turns("/v1/responses")[len(turns)]
        assert RECALLED in texts(second["input"]), "the UserPromptSubmit recall is not in the second session's request"
    listed = server.call_tool("session_list", {}, agent="kite")
    assert first in texts(listed), listed
    print(f"codex test: {time.monotonic() - started:.1f} s")

"""The real Claude Code CLI (pinned in tests/clients/package.json, installed by tests/run.sh) against a real
persmem server, with a scripted stand-in for the model API (tests/clients/model_api.py): what the model would
have received is asserted on. `persmem hooks install` puts the hooks into the temp config folder; the persmem MCP
server is reached over HTTP with the agent's token."""

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

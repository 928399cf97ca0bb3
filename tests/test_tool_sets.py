"""Tool sets: a connection lists only its agent's sets (memory, sessions and mail by default), over HTTP and
stdio, and a call outside them is refused naming the command that adds the set; `persmem agent tools` changes
them; the default sets' definitions stay within the token budget, counted with Claude's tokenizer; and
`persmem connect` prints lines that work as pasted, reading the token from a file only the user can read."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess

import anyio
import pytest

from persmem_core.auth.agents import AgentStore
from persmem_core.host import Host
from persmem_core.sdk.testing import ToolCallError, persmem_command
from persmem_core.testing import clean_env, start_server, write_config
from persmem_core.tool_costs import DEFAULT_BUDGET, Costs, count_tokens

DEFAULT_ENV = {"PERSMEM_DEFAULT_TOOL_SETS": ""}  # the test run lists every set; these tests want the real default
MEMORY = {"memory_store", "memory_bulk_store", "memory_search", "memory_get", "memory_update", "memory_delete",
          "memory_validate", "memory_unlink", "persmem_whoami"}
SESSIONS = {"session_list", "session_read", "session_search"}
WORKSPACE = {"shell_exec", "file_read", "file_write", "file_patch", "diff_generate", "git_op"}


def env_of(home, **extra):
    env = clean_env(home, **extra)
    env.pop("PERSMEM_DEFAULT_TOOL_SETS", None)
    return env


def persmem(*args, env):
    return subprocess.run(persmem_command(*args), env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("sets") / "home"
    write_config(home, {"searxng": {"url": "http://127.0.0.1:9"}})  # configured, so the web set exists
    running = start_server(home, ("kite", "wren"), env_of(home, PERSMEM_DISABLE_PLUGINS="dashboard"))
    yield running
    running.stop()


def listed(server, agent):
    return {tool.name for tool in server.list_tools(agent=agent)}


def test_a_default_connection_lists_memory_sessions_and_mail_only(server):
    names = listed(server, "kite")
    assert MEMORY | SESSIONS <= names and "amq_send" in names
    assert not names & (WORKSPACE | {"web_search", "web_fetch", "chorus_init", "memory_stats"})


def test_a_call_outside_the_sets_is_refused_naming_the_command_that_adds_it(server):
    with pytest.raises(ToolCallError) as refused:
        server.call_tool("shell_exec", {"command": "id"}, agent="kite")
    assert "tool set 'workspace'" in str(refused.value) and "agent tools kite --add workspace" in str(refused.value)


def test_agent_tools_adds_and_removes_sets_and_the_next_connection_lists_them(server):
    added = persmem("agent", "tools", "wren", "--add", "workspace,web", env=server.env)
    assert added.returncode == 0, added.stderr
    assert "tool sets memory, sessions, mail, workspace, web:" in added.stdout and "tokens" in added.stdout
    assert WORKSPACE | {"web_search"} <= listed(server, "wren")
    assert server.call_tool("file_write", {"path": "note.txt", "content": "hi"}, agent="wren")
    assert persmem("agent", "tools", "wren", "--remove", "web", env=server.env).returncode == 0
    assert "web_search" not in listed(server, "wren") and "shell_exec" in listed(server, "wren")
    assert "workspace" not in " ".join(sorted(listed(server, "kite")))  # another agent's choice is its own
    unknown = persmem("agent", "tools", "wren", "--add", "bogus", env=server.env)
    assert unknown.returncode != 0 and "unknown tool set 'bogus'" in unknown.stderr and "workspace" in unknown.stderr
    assert persmem("agent", "tools", "wren", "--default", env=server.env).returncode == 0
    assert "shell_exec" not in listed(server, "wren")
    assert persmem("agent", "tools", "wren", "--set", "all", env=server.env).returncode == 0
    fewer = persmem("agent", "tools", "wren", "--remove", "chorus,curation", env=server.env)
    assert fewer.returncode == 0 and "not given: chorus (+" in fewer.stdout  # every set but these two
    assert WORKSPACE <= listed(server, "wren") and "chorus_init" not in listed(server, "wren")
    assert persmem("agent", "tools", "wren", "--default", env=server.env).returncode == 0


def test_a_stdio_session_lists_the_same_sets(tmp_path):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    home = tmp_path / "home"
    AgentStore(home).add("kite")
    AgentStore(home).set_tool_sets("kite", ["memory", "workspace"])
    env = env_of(home, PERSMEM_DISABLE_PLUGINS="dashboard")
    command = persmem_command("serve", "--transport", "stdio", "--agent", "kite")
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)

    async def names():
        with open(tmp_path / "stdio.log", "a") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                return {tool.name for tool in (await client.list_tools()).tools}

    found = anyio.run(names)
    assert MEMORY | WORKSPACE <= found and not found & (SESSIONS | {"amq_send"})


def test_a_stdio_session_forwarding_to_the_running_server_lists_its_agents_sets(server):
    """A stdio session started while the HTTP server owns the home forwards over the local socket: the owner
    answers with the stdio agent's sets, not the default's or another agent's."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    AgentStore(server.home).add("stdio_ws")
    AgentStore(server.home).set_tool_sets("stdio_ws", ["workspace"])
    command = persmem_command("serve", "--transport", "stdio", "--agent", "stdio_ws")
    params = StdioServerParameters(command=command[0], args=command[1:], env=server.env)

    async def names_and_refusal():
        with open(server.home / "stdio-forward.log", "a") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                refused = await client.call_tool("memory_search", {"query": "x"})
                return names, refused

    names, refused = anyio.run(names_and_refusal)
    assert names == WORKSPACE
    assert refused.is_error and "agent tools stdio_ws --add memory" in refused.content[0].text


def test_call_tool_in_process_applies_the_same_rule(tmp_path):
    from persmem_core.sdk import UserError
    from persmem_core.sdk.testing import call_tool

    home = tmp_path / "home"
    AgentStore(home).add("kite")
    host = Host(environ=env_of(home, PERSMEM_DISABLE_PLUGINS="dashboard"))
    host.startup()
    try:
        assert call_tool(host, "persmem_whoami", {}, agent="kite")
        with pytest.raises(UserError, match="agent tools kite --add workspace"):
            call_tool(host, "file_read", {"path": "x"}, agent="kite")
    finally:
        host.shutdown()


def test_the_default_sets_cost_at_most_the_budget_counted_with_claudes_tokenizer(tmp_path):
    tokens, exact = count_tokens('{"name":"memory_search"}')
    assert exact and 0 < tokens < 20  # the tokenizer file is found, not the characters/4 estimate
    costs = Costs(Host(environ=env_of(tmp_path / "home")))
    default = costs.of_sets(["memory", "sessions", "mail"])
    assert default <= DEFAULT_BUDGET, costs.summary()
    assert costs.of_sets(["all"]) > default and costs.exact


def test_doctor_and_connect_print_what_the_sets_cost(tmp_path):
    env = env_of(tmp_path / "home")
    assert persmem("agent", "add", "kite", env=env).returncode == 0
    doctor = persmem("doctor", env=env).stdout
    assert "PASS  tool sets: default (memory+sessions+mail)" in doctor and "workspace" in doctor
    connect = persmem("connect", "kite", "--tools", "memory,mail", env=env)
    assert connect.returncode == 0, connect.stderr
    assert "# agent kite: tool sets memory, mail:" in connect.stdout and "not given: " in connect.stdout
    assert AgentStore(tmp_path / "home").agents()["kite"].tool_sets == ["memory", "mail"]


def test_unconfigured_searxng_lists_no_tools_and_doctor_says_why(tmp_path):
    home = tmp_path / "home"
    env = env_of(home)
    costs = Costs(Host(environ=env))
    assert "web" not in costs.per_set()
    doctor = persmem("doctor", env=env).stdout
    assert "searxng: not configured ([searxng] url is unset)" in doctor


# -- connect's lines work as pasted ---------------------------------------------------------------------------

def pasted(line: str, cwd) -> list[str]:
    """The words bash passes to the line's command when the line is pasted as printed (the command replaced by a
    function printing them); for an `export` line, the value it exports."""
    command = shlex.split(line)[0]
    if command == "export":
        script = f'{line}\nprintf "%s\\0" "${{PERSMEM_TOKEN:-}}"\n'
    else:
        script = f'{command}() {{ printf "%s\\0" "$@"; }}\n{line}\n'
    ran = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], cwd=cwd, capture_output=True,
                         timeout=30, env={"PATH": os.environ["PATH"], "HOME": str(cwd)})
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.decode().split("\0")[:-1]


def test_connect_lines_work_as_pasted_with_the_token_read_from_a_private_file(tmp_path):
    home = tmp_path / "my home $(touch PWNED) 'q'"
    env = env_of(home)
    added = persmem("agent", "add", "kite", env=env)
    token = next(line.split()[1] for line in added.stdout.splitlines() if line.startswith("token: "))
    kept = home / "tokens" / "kite"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    printed = persmem("connect", "kite", env=env).stdout
    assert token not in printed  # never on screen unless asked
    claude = next(line for line in printed.splitlines() if line.startswith("claude mcp add --transport http"))
    words = pasted(claude, tmp_path)
    assert words[:7] == ["mcp", "add", "--transport", "http", "persmem", "http://127.0.0.1:8765/mcp", "--header"]
    assert words[7] == f"Authorization: Bearer {token}"
    export = next(line for line in printed.splitlines() if line.startswith("export "))
    assert pasted(export, tmp_path)[-1] == token
    assert not list(tmp_path.glob("PWNED*"))
    shown = persmem("connect", "kite", "--show-token", env=env).stdout
    assert f"Authorization: Bearer {token}" in shown
    renewed = persmem("agent", "token", "kite", env=env)
    assert renewed.returncode == 0 and kept.read_text().strip() != token
    assert persmem("agent", "revoke", "kite", env=env).returncode == 0 and not kept.exists()

"""call_tool(host, ...): a plugin author's test calls a tool in-process, as an agent, with the checks and errors a real
client gets; and PERSMEM_TRACE_HOOKS writes every hook call (names, never values) to stderr."""

from __future__ import annotations

import subprocess

import pytest

from persmem_core.sdk import UserError
from persmem_core.sdk.testing import call_tool, persmem_command

NO_HEAVY = "memory_hnsw,amq_maildir,git,searxng,dashboard,sessions"


@pytest.fixture
def host(persmem_host):
    made = persmem_host(PERSMEM_DISABLE_PLUGINS=NO_HEAVY)
    made.agents.add("kite")
    made.startup()
    yield made
    made.shutdown()


def test_a_tool_answers_its_caller(host):
    assert call_tool(host, "persmem_whoami", agent="kite")["agent"] == "kite"
    written = call_tool(host, "file_write", {"path": "notes/a.txt", "content": "hello\n"}, agent="kite")
    assert written["status"] == "written" and written["bytes"] == 6 and written["created"] is True
    assert call_tool(host, "file_read", {"path": "notes/a.txt"}, agent="kite")["content"] == "hello\n"


def test_refusals_read_as_a_client_reads_them(host):
    with pytest.raises(UserError, match=r"unknown argument.*'pathh'.*did you mean 'path'"):
        call_tool(host, "file_read", {"pathh": "x"}, agent="kite")
    with pytest.raises(UserError, match="outside the workspace"):
        call_tool(host, "file_read", {"path": "/etc/passwd"}, agent="kite")
    with pytest.raises(UserError, match="no tool 'memory_search' is registered"):
        call_tool(host, "memory_search", {"query": "x"}, agent="kite")
    with pytest.raises(UserError, match="no agent 'wren' in this home"):
        call_tool(host, "persmem_whoami", agent="wren")


def test_trace_hooks_names_each_call_and_no_value(persmem_env):
    env = persmem_env(PERSMEM_TRACE_HOOKS="1", PERSMEM_DISABLE_PLUGINS=NO_HEAVY)
    done = subprocess.run(persmem_command("config", "check"), env=env, capture_output=True, text=True, timeout=60)
    lines = [line for line in done.stderr.splitlines() if line.startswith("persmem hook ")]
    assert any(line.startswith("persmem hook register_config(register) <- shell: answered (") for line in lines), lines
    quiet = subprocess.run(persmem_command("config", "check"), env=persmem_env(PERSMEM_DISABLE_PLUGINS=NO_HEAVY),
                           capture_output=True, text=True, timeout=60)
    assert "persmem hook" not in quiet.stderr

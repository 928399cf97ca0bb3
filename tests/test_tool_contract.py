"""The tool contract every plugin's tools share, through a real server: an argument a tool does not have is
refused naming the valid ones (the SDK alone drops it silently), the schemas say so, and persmem_whoami's
description matches what it returns."""

import anyio
import pytest

from persmem_core.transport.tool_answers import ToolCallError, tool_result

# The memory plugin's model load is the slow part of a start; its tools are checked by its own tests.
NO_MEMORY = {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from persmem_core.testing import clean_env, start_server

    home = tmp_path_factory.mktemp("home")
    running = start_server(home, ["kite", "wren"], clean_env(home, **NO_MEMORY))
    yield running
    running.stop()


# -- attack: a misspelt or invented argument, silently dropped, changes what the call does -------------------

def test_unknown_argument_on_tools_of_two_plugins_is_refused_naming_the_valid_ones(server):
    with pytest.raises(ToolCallError) as mail:
        server.call_tool("amq_check", {"agnet": "kite"}, agent="kite")
    assert str(mail.value) == ("unknown argument 'agnet' for amq_check; valid arguments: agent, kind, priority, "
                               "from_agent (did you mean 'agent'?). Remove or rename it and call again.")
    with pytest.raises(ToolCallError) as shell:
        server.call_tool("file_read", {"pth": "x.txt", "start_line": 1}, agent="kite")
    assert "unknown argument 'pth' for file_read; valid arguments: path, start_line, end_line" in str(shell.value)
    assert "did you mean 'path'?" in str(shell.value)
    assert server.call_tool("persmem_whoami", {}, agent="kite")["agent"] == "kite"  # still up


def test_unknown_argument_of_a_tool_without_arguments_says_it_takes_none(server):
    with pytest.raises(ToolCallError, match=r"unknown argument 'verbose' for persmem_whoami; valid arguments: "
                                            r"none \(call it with \{\}\)"):
        server.call_tool("persmem_whoami", {"verbose": True}, agent="kite")


def test_several_unknown_arguments_are_all_named_with_their_closest_valid_names(server):
    with pytest.raises(ToolCallError) as info:
        server.call_tool("amq_history", {"limt": 3, "thred": "x", "colour": "red"}, agent="kite")
    text = str(info.value)
    assert text.startswith("unknown arguments 'limt', 'thred', 'colour' for amq_history; valid arguments: ")
    assert "'limit' for 'limt'" in text and "'thread' for 'thred'" in text and "colour'?" not in text


def test_a_flood_of_unknown_arguments_gets_a_short_refusal(server):
    arguments = {f"junk{i}" + "x" * 500: i for i in range(200)}
    with pytest.raises(ToolCallError) as info:
        server.call_tool("amq_agents", arguments, agent="kite")
    assert "and 195 more for amq_agents" in str(info.value) and len(str(info.value)) < 600


def test_a_forged_caller_argument_is_refused_not_used(server):
    for forged in ("call", "mcp_context"):
        with pytest.raises(ToolCallError, match=f"unknown argument '{forged}' for amq_check"):
            server.call_tool("amq_check", {forged: {"agent": "wren"}}, agent="kite")


def test_every_advertised_schema_forbids_other_arguments(server):
    tools = server.list_tools(agent="kite")
    assert len(tools) > 10
    assert all(tool.input_schema.get("additionalProperties") is False for tool in tools), [
        tool.name for tool in tools if tool.input_schema.get("additionalProperties") is not False]


def test_wrong_types_still_name_the_field(server):
    with pytest.raises(ToolCallError, match="amq_history: invalid arguments: `limit`"):
        server.call_tool("amq_history", {"limit": "many"}, agent="kite")


def test_unknown_argument_over_stdio_is_refused_and_the_session_goes_on(persmem_stdio):
    async def run():
        async with persmem_stdio(agent="kite", env=NO_MEMORY) as client:
            refused = await client.call_tool("amq_agents", {"verbose": 1})
            who = tool_result(await client.call_tool("persmem_whoami", {}))
        return refused, who

    refused, who = anyio.run(run)
    assert refused.is_error
    assert refused.content[0].text.startswith("unknown argument 'verbose' for amq_agents; valid arguments: none")
    assert who["agent"] == "kite" and who["transport"] == "stdio"


# -- attack: a description that promises what the result does not hold --------------------------------------

def test_whoami_lists_each_plugins_tools_as_its_description_says(server):
    tool = {t.name: t for t in server.list_tools(agent="kite")}["persmem_whoami"]
    assert "names of the tools each one gives you" in tool.description
    who = server.call_tool("persmem_whoami", {}, agent="kite")
    listed = {name for plugin in who["plugins"] for name in plugin["tools"]}
    assert listed == {t.name for t in server.list_tools(agent="kite")}
    plugins = {plugin["name"]: plugin for plugin in who["plugins"]}
    assert "amq_send" in plugins["amq_maildir"]["tools"] and plugins["core"]["tools"] == ["persmem_whoami"]
    assert "memory_hnsw" not in plugins  # a disabled plugin offers nothing

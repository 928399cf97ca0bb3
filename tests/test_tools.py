"""Tools from plugins over MCP: schemas from type hints, docstrings, clear errors, the server stays up."""

import anyio
import httpx2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persmem_core.transport.tool_answers import ToolCallError, tool_result


@pytest.fixture
def echo_server(persmem_server, sample_env):
    env = sample_env()
    return persmem_server(agents=["kite"], env={k: env[k] for k in ("PYTHONPATH", "PERSMEM_PLUGIN_MODULES")},
                          config={"echo": {"prefix": ">>"}})


def test_schema_from_type_hints_and_description_from_docstring(echo_server):
    tools = {t.name: t for t in echo_server.list_tools(agent="kite")}
    say = tools["echo_say"]
    assert say.description.startswith("Echo `text` back")
    assert say.input_schema["properties"]["text"]["type"] == "string"
    assert say.input_schema["properties"]["times"]["default"] == 1
    assert say.input_schema["required"] == ["text"]
    assert "call" not in say.input_schema["properties"]  # the caller is not an argument
    assert {"persmem_whoami", "echo_refuse", "echo_crash", "echo_slow"} <= set(tools)


def test_tool_gets_config_and_calling_agent(echo_server):
    result = echo_server.call_tool("echo_say", {"text": "hi", "times": 2}, agent="kite")
    assert result == {"text": "hi hi", "prefix": ">>", "agent": "kite"}


def test_user_error_message_reaches_the_client(echo_server):
    with pytest.raises(ToolCallError, match="refused on purpose: because"):
        echo_server.call_tool("echo_refuse", {"reason": "because"}, agent="kite")


def test_crash_is_an_error_without_internals_and_the_server_stays_up(echo_server):
    with pytest.raises(ToolCallError) as info:
        echo_server.call_tool("echo_crash", agent="kite")
    message = str(info.value)
    assert "RuntimeError" in message and "reference" in message
    assert "secret internal detail" not in message and "Traceback" not in message
    assert "secret internal detail" in echo_server.log()  # the operator can find it
    assert echo_server.call_tool("echo_say", {"text": "still up"}, agent="kite")["text"] == "still up"


def test_bad_arguments_name_the_field(echo_server):
    with pytest.raises(ToolCallError) as info:
        echo_server.call_tool("echo_say", {"text": "x", "times": "many"}, agent="kite")
    assert "`times`" in str(info.value) and "integer" in str(info.value)
    with pytest.raises(ToolCallError, match="`text` is required"):
        echo_server.call_tool("echo_say", {}, agent="kite")
    with pytest.raises(ToolCallError, match="[Uu]nknown tool"):
        echo_server.call_tool("no_such_tool", {}, agent="kite")


def test_forged_caller_argument_is_refused(echo_server):
    with pytest.raises(ToolCallError, match="unknown argument 'call' for echo_say; valid arguments: text, times"):
        echo_server.call_tool("echo_say", {"text": "x", "call": {"agent": "wren"}}, agent="kite")
    assert echo_server.call_tool("echo_say", {"text": "x"}, agent="kite")["agent"] == "kite"


def test_async_tools_run_concurrently(echo_server):
    async def run():
        async with echo_server.client("kite") as client:
            start = anyio.current_time()
            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(client.call_tool, "echo_slow", {"seconds": 0.5})
            return anyio.current_time() - start

    assert anyio.run(run) < 2.0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    text=st.one_of(st.text(max_size=2000), st.integers(), st.none(), st.lists(st.text(max_size=5), max_size=3)),
    times=st.one_of(st.integers(-5, 5), st.text(max_size=10), st.floats(allow_nan=True)),
)
def test_any_arguments_give_a_result_or_a_clear_error(echo_server, text, times):
    async def run():
        async with echo_server.client("kite") as client:
            return await client.call_tool("echo_say", {"text": text, "times": times})

    result = anyio.run(run)
    if result.is_error:
        assert "echo_say" in result.content[0].text and "Traceback" not in result.content[0].text
    else:
        assert "text" in tool_result(result)
    assert httpx2.get(echo_server.base_url + "/healthz").status_code == 200


def test_stdio_transport_with_agent_flag_and_env(persmem_stdio, sample_env):
    env = sample_env()

    async def run():
        async with persmem_stdio(agent="wren") as client:
            who = tool_result(await client.call_tool("persmem_whoami", {}))
        async with persmem_stdio(env={k: env[k] for k in ("PYTHONPATH", "PERSMEM_PLUGIN_MODULES")} | {"PERSMEM_AGENT": "kite"}) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            said = tool_result(await client.call_tool("echo_say", {"text": "hey"}))
            crash = await client.call_tool("echo_crash", {})
            after = tool_result(await client.call_tool("persmem_whoami", {}))
        return who, names, said, crash, after

    who, names, said, crash, after = anyio.run(run)
    assert who["agent"] == "wren" and who["transport"] == "stdio"
    assert "echo_say" in names and said["agent"] == "kite"
    assert crash.is_error and after["agent"] == "kite"


def test_stdio_default_agent_and_invalid_agent(persmem_stdio, run_cli, persmem_env):
    async def run():
        async with persmem_stdio() as client:
            return tool_result(await client.call_tool("persmem_whoami", {}))

    assert anyio.run(run)["agent"] == "local"
    bad = run_cli("serve", "--transport", "stdio", "--agent", "../etc", env=persmem_env(), input="")
    assert bad.returncode == 1 and "invalid agent name" in bad.stderr


def test_startup_runs_before_serving_and_shutdown_on_stop(echo_server):
    log = echo_server.home / "echo" / "lifecycle.log"
    assert log.read_text() == "startup\n"
    echo_server.stop()
    assert log.read_text() == "startup\nshutdown\n"


def test_a_call_without_an_agent_is_refused_never_the_default_agent(persmem_host):
    """The resolver reads the agent the auth middleware put in the request; a call that reaches the tools
    without one (an SDK change, a route that skipped the middleware) is an error, not the default agent."""
    from mcp.server.mcpserver import Context
    from mcp.server.mcpserver.exceptions import ToolError

    from persmem_core.transport.tools import CallerResolver

    host = persmem_host()
    with pytest.raises(ToolError, match="unauthenticated request"):
        CallerResolver(host)(Context())

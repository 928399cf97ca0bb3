"""The AMQ tools through a real server and real MCP clients: two agents talking, identities the server
vouches for, persMEM's names and defaults, threads, broadcast, filters, grants."""

import anyio
import pytest

from persmem_core.sdk.testing import ToolCallError


def call(server, tool, caller, /, **args):
    return server.call_tool(tool, args, agent=caller)


def test_tools_keep_persmem_names_arguments_and_defaults(server):
    tools = {t.name: t.input_schema for t in server.list_tools(agent="kite")}
    assert {"amq_send", "amq_check", "amq_read", "amq_history", "amq_timeline", "amq_reply", "amq_thread",
            "amq_agents"} <= set(tools)
    send = tools["amq_send"]
    assert set(send["required"]) == {"to_agent", "body"} and "from_agent" not in send["properties"]
    assert send["properties"]["subject"]["default"] == "" and send["properties"]["kind"]["default"] == "message"
    assert send["properties"]["priority"]["default"] == "normal"
    assert set(tools["amq_read"]["required"]) == {"msg_id"} and tools["amq_read"]["properties"]["agent"]["default"] == ""
    assert tools["amq_history"]["properties"]["limit"]["default"] == 10
    assert tools["amq_timeline"]["properties"]["limit"]["default"] == 20
    assert all("call" not in schema["properties"] for schema in tools.values())


def test_two_agents_hold_a_multi_round_conversation_over_separate_sessions(server):
    async def converse():
        async with server.client("kite") as kite, server.client("wren") as wren:
            async def tool(client, name, **args):
                from persmem_core.sdk.testing import tool_result

                return tool_result(await client.call_tool(name, args))

            first = await tool(kite, "amq_send", to_agent="wren", subject="Cache plan",
                               body="Round 0: should we cache search results?", kind="question")
            thread = first["id"]
            for round_no in range(1, 4):
                inbox = await tool(wren, "amq_check", agent="wren", from_agent="kite")
                assert inbox["new_count"] == 1
                msg = await tool(wren, "amq_read", agent="wren", msg_id=inbox["messages"][0]["id"])
                assert msg["from"] == "kite" and msg["claimed"] is True and msg["thread" if round_no > 1 else "id"]
                await tool(wren, "amq_reply", msg_id=msg["id"], body=f"wren's answer {round_no}")
                inbox = await tool(kite, "amq_check", agent="")
                assert [m["from"] for m in inbox["messages"]] == ["wren"]
                reply = await tool(kite, "amq_read", agent="kite", msg_id=inbox["messages"][0]["id"])
                assert reply["body"] == f"wren's answer {round_no}" and reply["thread"] == thread
                assert reply["subject"] == "Re: Cache plan" and reply["kind"] == "answer"
                if round_no < 3:
                    await tool(kite, "amq_reply", msg_id=reply["id"], body=f"kite's follow-up {round_no}")
            return await tool(kite, "amq_thread", thread_id=thread), await tool(wren, "amq_history", limit=50)

    thread, history = anyio.run(converse)
    bodies = [m["body"] for m in thread["messages"]]
    assert bodies == ["Round 0: should we cache search results?", "wren's answer 1", "kite's follow-up 1",
                      "wren's answer 2", "kite's follow-up 2", "wren's answer 3"]
    assert [m["from"] for m in thread["messages"]] == ["kite", "wren"] * 3
    assert {m["status"] for m in history["messages"]} == {"read"} and history["total"] == 3


def test_the_sender_is_the_authenticated_agent_and_inboxes_are_private(server):
    with pytest.raises(ToolCallError, match="unknown argument 'from_agent' for amq_send"):  # the sender is the caller
        call(server, "amq_send", "kite", from_agent="wren", to_agent="operator", body="I am wren, trust me")
    with pytest.raises(ToolCallError, match="reads only your own inbox"):
        call(server, "amq_check", "kite", agent="wren")
    sent = call(server, "amq_send", "wren", to_agent="kite", body="private to kite", subject="p")
    with pytest.raises(ToolCallError, match="reads only your own inbox"):
        call(server, "amq_read", "wren", agent="kite", msg_id=sent["id"])
    assert all(m["subject"] != "I am wren, trust me" for m in call(server, "amq_check", "operator")["messages"])
    got = call(server, "amq_read", "kite", agent="KITE ", msg_id=sent["id"])  # persMEM normalizes names
    assert got["from"] == "wren" and got["body"] == "private to kite"


def test_bad_values_are_refused_with_the_valid_ones(server):
    with pytest.raises(ToolCallError, match="unknown kind 'gossip'; use one of: message, question, answer"):
        call(server, "amq_send", "kite", to_agent="wren", body="x", kind="gossip")
    with pytest.raises(ToolCallError, match="unknown priority 'asap'; use one of: urgent, normal, low"):
        call(server, "amq_send", "kite", to_agent="wren", body="x", priority="asap")
    with pytest.raises(ToolCallError, match="unknown recipient 'heron'; agents are: kite, operator, wren"):
        call(server, "amq_send", "kite", to_agent="heron", body="x")
    with pytest.raises(ToolCallError, match="cannot send to yourself"):
        call(server, "amq_send", "kite", to_agent="kite", body="x")
    with pytest.raises(ToolCallError, match="body is empty"):
        call(server, "amq_send", "kite", to_agent="wren", body="  ")
    with pytest.raises(ToolCallError, match="limit is 200,000"):
        call(server, "amq_send", "kite", to_agent="wren", body="y" * 200_001)
    with pytest.raises(ToolCallError, match="message not found"):
        call(server, "amq_read", "kite", agent="kite", msg_id="20990101T000000-000000_wren_00000000")
    with pytest.raises(ToolCallError, match="invalid msg_id"):
        call(server, "amq_read", "kite", agent="kite", msg_id="../../wren/inbox/new/x")


def test_broadcast_filters_priority_order_and_agents(server):
    for name in ("kite", "wren", "operator"):  # start from empty inboxes
        for m in call(server, "amq_check", name)["messages"]:
            call(server, "amq_read", name, agent=name, msg_id=m["id"])
    everyone = call(server, "amq_send", "operator", to_agent="all", body="standup in 5",
                    kind="status", priority="low")
    assert sorted(everyone["to"]) == ["kite", "wren"]
    call(server, "amq_send", "wren", to_agent="kite, operator", body="prod is down",
         kind="observation", priority="urgent")
    inbox = call(server, "amq_check", "kite")
    assert [m["priority"] for m in inbox["messages"]] == ["urgent", "low"]  # urgent first
    assert inbox["messages"][0]["recipients"] == ["kite", "operator"]
    assert [m["from"] for m in call(server, "amq_check", "kite", from_agent="operator")["messages"]] == ["operator"]
    assert [m["kind"] for m in call(server, "amq_check", "kite", kind="observation")["messages"]] == ["observation"]
    assert call(server, "amq_history", "kite", priority="urgent")["total"] == 1
    agents = {a["agent"]: a for a in call(server, "amq_agents", "kite")["agents"]}
    assert agents["kite"]["unread"] == 2 and agents["kite"]["you"] and agents["wren"]["unread"] == 1


def test_a_granted_reader_looks_without_claiming_and_timeline_respects_privacy(server):
    sent = call(server, "amq_send", "kite", to_agent="wren", body="for wren only", subject="t1")
    peeked = call(server, "amq_read", "operator", agent="wren", msg_id=sent["id"])
    assert peeked["body"] == "for wren only" and peeked["claimed"] is False and peeked["status"] == "unread"
    assert sent["id"] in [m["id"] for m in call(server, "amq_check", "wren")["messages"]]
    assert sent["id"] in [m["id"] for m in call(server, "amq_timeline", "operator", limit=50)["messages"]]
    assert sent["id"] in [m["id"] for m in call(server, "amq_timeline", "kite", limit=50)["messages"]]  # sender
    call(server, "amq_send", "wren", to_agent="operator", body="not for kite", subject="t2")
    kite_view = call(server, "amq_timeline", "kite", limit=50)["messages"]
    assert all(m["subject"] != "t2" for m in kite_view) and len(kite_view) <= 50
    with pytest.raises(ToolCallError, match="limit must be"):
        call(server, "amq_timeline", "kite", limit=0)


def test_the_second_read_of_a_message_does_not_claim_it_again(server):
    sent = call(server, "amq_send", "kite", to_agent="wren", body="once")
    first = call(server, "amq_read", "wren", agent="wren", msg_id=sent["id"])
    second = call(server, "amq_read", "wren", agent="wren", msg_id=sent["id"] + ".md")
    assert (first["claimed"], second["claimed"]) == (True, False) and second["status"] == "read"


def test_stdio_sender_is_the_configured_agent(persmem_stdio, no_memory):
    from persmem_core.sdk.testing import tool_result

    async def run():
        async with persmem_stdio(agent="kite", config={"amq": {"agents": ["kite", "wren"]}}, env=no_memory) as client:
            sent = tool_result(await client.call_tool("amq_send", {"to_agent": "wren", "body": "hi"}))
            forged = await client.call_tool("amq_send", {"from_agent": "wren", "to_agent": "kite", "body": "hi"})
            return sent, forged

    sent, forged = anyio.run(run)
    assert sent["from"] == "kite" and sent["status"] == "delivered"
    assert forged.is_error and "unknown argument 'from_agent' for amq_send" in forged.content[0].text

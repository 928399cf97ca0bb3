"""The AMQ tools keep their contract, through a real server: a reply or a thread names mail the caller can see
(never a conversation under a made-up name), and results carry no internals (file names, format version)."""

import json

import anyio
import httpx2
import pytest

from persmem_amq_maildir.service import briefing_section
from persmem_amq_maildir.rows import row
from persmem_core.sdk.testing import ToolCallError, tool_result

INTERNAL = {"_filename", "schema"}


def call(server, tool, caller, /, **args):
    return server.call_tool(tool, args, agent=caller)


def _sent_by_wren_to_operator(server) -> str:
    return call(server, "amq_send", "wren", to_agent="operator", body="between us", subject="w>o")["id"]


# -- attack: a reply or thread that names no message starts a conversation under that name ------------------

def test_reply_to_an_id_nobody_sent_is_refused_naming_where_ids_come_from(server):
    with pytest.raises(ToolCallError) as info:
        call(server, "amq_send", "kite", to_agent="wren", body="answer", reply_to="nope")
    text = str(info.value)
    assert "reply_to 'nope' is not a message you can see" in text and "amq_check, amq_history" in text
    assert all(m["subject"] != "nope" and m.get("thread") != "nope"
               for m in call(server, "amq_history", "wren", limit=1000)["messages"])


def test_reply_to_a_message_between_two_other_agents_is_refused(server):
    foreign = _sent_by_wren_to_operator(server)
    with pytest.raises(ToolCallError, match=f"reply_to '{foreign}' is not a message you can see"):
        call(server, "amq_send", "kite", to_agent="wren", body="butting in", reply_to=foreign)


def test_thread_nobody_started_is_refused(server):
    with pytest.raises(ToolCallError, match="thread 'made-up-topic' is not a conversation you can see"):
        call(server, "amq_send", "kite", to_agent="wren", body="x", thread="made-up-topic")
    foreign = _sent_by_wren_to_operator(server)
    with pytest.raises(ToolCallError, match=f"thread '{foreign}' is not a conversation you can see"):
        call(server, "amq_send", "kite", to_agent="wren", body="x", thread=foreign)


def test_reply_to_and_a_different_thread_together_are_refused_naming_both(server):
    first = call(server, "amq_send", "kite", to_agent="wren", body="one", subject="a")["id"]
    other = call(server, "amq_send", "kite", to_agent="wren", body="two", subject="b")["id"]
    with pytest.raises(ToolCallError, match=f"reply_to '{first}' is in thread '{first}', not in thread '{other}'"):
        call(server, "amq_send", "kite", to_agent="wren", body="x", reply_to=first, thread=other)


def test_replies_to_mail_the_caller_sent_or_received_join_its_thread(server):
    asked = call(server, "amq_send", "kite", to_agent="wren", body="question?", kind="question")
    follow_up = call(server, "amq_send", "kite", to_agent="wren", body="also...", reply_to=asked["id"])
    assert follow_up["thread"] == asked["id"]  # a reply to one's own sent message
    answer = call(server, "amq_send", "wren", to_agent="kite", body="yes", reply_to=follow_up["id"])
    assert answer["thread"] == asked["id"]  # a reply to a received message
    more = call(server, "amq_send", "wren", to_agent="kite", body="and", thread=asked["id"])
    assert more["thread"] == asked["id"]
    # a reader granted every inbox ([amq] readers) can see, and so answer, mail between others
    seen = call(server, "amq_send", "operator", to_agent="kite", body="noted", reply_to=answer["id"])
    assert seen["thread"] == asked["id"]


# -- attack: internals (file names, format version) leak into what the caller reads -------------------------

def _keys(value) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def test_no_tool_result_carries_internal_fields(server):
    sent = call(server, "amq_send", "kite", to_agent="wren", body="internals?", subject="i")
    replied = call(server, "amq_reply", "wren", msg_id=sent["id"], body="none")
    results = {
        "amq_send": sent,
        "amq_reply": replied,
        "amq_check": call(server, "amq_check", "wren"),
        "amq_read": call(server, "amq_read", "wren", agent="", msg_id=sent["id"]),
        "amq_history": call(server, "amq_history", "wren", limit=5),
        "amq_timeline": call(server, "amq_timeline", "kite", limit=5),
        "amq_thread": call(server, "amq_thread", "kite", thread_id=sent["id"]),
        "amq_agents": call(server, "amq_agents", "kite"),
    }
    assert results["amq_read"]["body"] == "internals?" and results["amq_thread"]["total"] == 2
    for tool, result in results.items():
        assert not _keys(result) & INTERNAL, (tool, result)


def test_amq_routes_carry_no_internal_fields(server):
    call(server, "amq_send", "kite", to_agent="wren", body="over http", subject="h")
    feed = httpx2.get(f"{server.base_url}/amq/messages?limit=5", headers=server.headers("wren")).json()
    assert feed["messages"] and not _keys(feed) & INTERNAL


def test_amq_read_over_stdio_has_no_internal_fields_and_a_made_up_reply_is_refused(persmem_stdio, no_memory):
    async def session(agent, tool, args):
        async with persmem_stdio(agent=agent, env=no_memory) as client:
            return await client.call_tool(tool, args)

    async def run():
        await session("wren", "persmem_whoami", {})  # registers wren, so kite can write to it
        sent = tool_result(await session("kite", "amq_send", {"to_agent": "wren", "body": "b"}))
        read = tool_result(await session("wren", "amq_read", {"agent": "", "msg_id": sent["id"]}))
        refused = await session("wren", "amq_send", {"to_agent": "kite", "body": "x",
                                                     "reply_to": "nope"})
        return read, refused

    read, refused = anyio.run(run)
    assert read["body"] == "b" and not set(read) & INTERNAL
    assert refused.is_error and "reply_to 'nope' is not a message you can see" in refused.content[0].text


def test_event_stream_and_summary_items_carry_no_internal_fields(store):
    # the SSE feed builds its items with the tools' `row`; the Mail section of a session start names the sender,
    # the time and the subject only
    store.send("kite", "wren", "hello")
    entry = store.box("wren").scan()[0][0]
    assert not set(row("wren", entry)) & INTERNAL
    lines = briefing_section(store, "wren", 4000)["text"].split("\n")[1:]
    assert lines and not set().union(*(json.loads(line) for line in lines)) & INTERNAL


def test_the_mail_is_kept_where_the_backend_says(server, request):
    import subprocess

    from persmem_core.sdk.testing import persmem_command

    sent = call(server, "amq_send", "kite", to_agent="wren", body="where am I kept?")
    status = subprocess.run(persmem_command("amq", "status"), env=server.env, capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 0, status.stderr
    if request.node.callspec.params["server"] == "nats":
        assert status.stdout.startswith("mail: NATS JetStream stream PERSMEM_AMQ")
        assert not list((server.home / "amq").glob(f"*/inbox/*/{sent['id']}.md"))
    else:
        assert status.stdout.startswith("mail root: ")
        assert list((server.home / "amq").glob(f"wren/inbox/new/{sent['id']}.md"))

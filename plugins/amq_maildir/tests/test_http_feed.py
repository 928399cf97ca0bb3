"""The /amq HTTP endpoint: unread counts, the feed, and the live Server-Sent Events stream."""

import json
import threading

import httpx2


def get(server, path, agent=None, **params):
    return httpx2.get(server.url.replace("/mcp", path), headers=server.headers(agent), params=params, timeout=10)


def test_unread_and_feed_need_an_agent_token(server):
    assert get(server, "/amq/unread").status_code == 401
    assert get(server, "/amq/events").status_code == 401
    bad = httpx2.get(server.url.replace("/mcp", "/amq/unread"), headers={"Authorization": "Bearer pm_nope"})
    assert bad.status_code == 401


def test_unread_counts_and_feed(server):
    before = get(server, "/amq/unread", "operator").json()["unread"]
    sent = server.call_tool("amq_send", {"to_agent": "wren", "body": "feed me <b>",
                                         "subject": "feed"}, agent="kite")
    after = get(server, "/amq/unread", "operator").json()
    assert after["you"] == "operator" and after["unread"]["wren"] == before.get("wren", 0) + 1
    feed = get(server, "/amq/messages", "wren", limit=5).json()["messages"]
    assert feed[0]["id"] == sent["id"] and feed[0]["body"] == "feed me <b>" and feed[0]["status"] == "unread"
    assert get(server, "/amq/messages", "wren", limit="lots").status_code == 400


def read_events(server, agent, wanted, found, ready):
    url = server.url.replace("/mcp", "/amq/events")
    with httpx2.stream("GET", url, headers=server.headers(agent), timeout=20) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        event, seen = None, False
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                data = json.loads(line.split(":", 1)[1])
                found.append((event, data))
                ready.set()
                seen = seen or (event == "message" and data["subject"] == wanted)
                if seen and event == "unread":  # counts follow the messages that changed them
                    return


def test_event_stream_announces_new_mail_the_caller_may_see(server):
    found, ready = [], threading.Event()
    reader = threading.Thread(target=read_events, args=(server, "wren", "live", found, ready), daemon=True)
    reader.start()
    assert ready.wait(10)
    assert found[0][0] == "unread" and found[0][1]["you"] == "wren"
    server.call_tool("amq_send", {"to_agent": "operator", "body": "not wren's business",
                                  "subject": "private"}, agent="kite")
    sent = server.call_tool("amq_send", {"to_agent": "wren", "body": "b", "subject": "live"},
                            agent="kite")
    reader.join(15)
    assert not reader.is_alive()
    messages = [data for event, data in found if event == "message"]
    assert messages[-1]["id"] == sent["id"] and messages[-1]["to"] == "wren"
    assert all(m["subject"] != "private" for m in messages)
    assert found[-1][0] == "unread" and found[-1][1]["unread"]["wren"] >= 1

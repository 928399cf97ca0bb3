"""A private collection ([memory] private_collections, default ["sessions"]: the session turns the sessions
plugin indexes) shows and lets change each agent's entries to that agent only, through a real `persmem serve`,
a real MCP client and the real dashboard, with two agents. wren holds an editors grant over everyone: it must
not reach into a private collection. Grouped by attack: reading another's entries, changing them, counting
them, memory_search's include_sessions, and choosing ids (squatting another's future turn, probing for its turns)."""

from __future__ import annotations

import json
import time

import httpx2
import pytest

from persmem_core.sdk import socket_path
from persmem_core.sdk.testing import ToolCallError, start_server, write_config
from persmem_memory_hnsw.sessions_answers import turn_id

KITE_TURN = "kite asked: where does the albatross deploy key live? In the ops vault, path albatross/deploy."
WREN_TURN = "wren asked: how do we rotate the albatross deploy key? Rotate it quarterly in the ops vault."


def capture_turns(server, agent, session_id, said, role="user"):
    """Turns as they really reach `sessions`: captured by the sessions plugin through the owner's socket and
    indexed by its worker (memory_store cannot name a turn's id there: the server gives ids in a private
    collection). `said` is one text per turn, all of `role`; returns their memory ids once they are indexed."""
    lines = [json.dumps({"type": role, "timestamp": "2026-03-01T10:00:00Z", "message": {
        "role": role, "content": text if role == "user" else [{"type": "text", "text": text}]}}) for text in said]
    with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(socket_path(server.home))), base_url="http://persmem",
                       headers={"X-Persmem-Agent": agent}, timeout=60) as http:
        start = http.get(f"/sessions/capture/claude/{session_id}").json()["lines"]
        reply = http.post("/sessions/capture", json={"client": "claude", "session_id": session_id,
                                                     "cwd": "/home/dev/src/acme", "first_line": start,
                                                     "lines": lines, "event": "Stop"})
        assert reply.status_code == 200, reply.text
    ids = [turn_id(agent, "claude", session_id, start + n) for n in range(len(said))]
    deadline = time.monotonic() + 60
    while True:
        try:
            server.call_tool("memory_get", {"memory_id": ids[-1], "collection": "sessions"}, agent=agent)
            return ids
        except ToolCallError:
            assert time.monotonic() < deadline, f"{agent}'s turns of {session_id} were not indexed within 60 s"
            time.sleep(0.3)


def store_turn(server, agent, session_id, text, role="user"):
    return capture_turns(server, agent, session_id, [text], role)[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    write_config(home, {"memory": {"editors": {"wren": ["*"]}}})
    running = start_server(home, agents=("kite", "wren"))
    running.kite_turn = store_turn(running, "kite", "kite-s1", KITE_TURN)
    running.kite_answer = store_turn(running, "kite", "kite-s1", "The albatross key is rotated by the ops team.",
                                     role="assistant")
    running.wren_turn = store_turn(running, "wren", "wren-s1", WREN_TURN)
    running.kite_memory = running.call_tool("memory_store", {
        "content": "Decision: the albatross deploy key stays in the ops vault.", "project": "acme"}, agent="kite")["id"]
    yield running
    running.stop()


def search(server, agent, **args):
    return server.call_tool("memory_search", {"query": "albatross deploy key", **args}, agent=agent)


# -- reading another agent's entries ----------------------------------------------------------------------

def test_search_of_a_private_collection_never_returns_another_agents_turns(server):
    found = search(server, "wren", collection="sessions")
    assert [r["id"] for r in found["results"]] == [server.wren_turn]


def test_asking_for_another_author_in_a_private_collection_finds_nothing_and_names_no_one(server):
    found = search(server, "wren", collection="sessions", author="kite")
    assert found["count"] == 0 and found["results"] == []
    assert "existing ones are 'wren'." in found["hint"]  # as if kite had nothing there (hints name wren's own)


def test_another_agents_turn_cannot_be_read_by_id_and_looks_like_a_missing_one(server):
    with pytest.raises(ToolCallError) as hidden:
        server.call_tool("memory_get", {"memory_id": server.kite_turn, "collection": "sessions"}, agent="wren")
    with pytest.raises(ToolCallError) as missing:
        server.call_tool("memory_get", {"memory_id": "turn-claude-0000000000000000-0", "collection": "sessions"},
                         agent="wren")
    assert str(hidden.value).replace(server.kite_turn, "ID") == str(missing.value).replace(
        "turn-claude-0000000000000000-0", "ID")
    assert KITE_TURN in server.call_tool("memory_get", {"memory_id": server.kite_turn, "collection": "sessions"},
                                         agent="kite")["content"]


# -- changing another agent's entries ---------------------------------------------------------------------

def test_an_editors_grant_does_not_reach_into_a_private_collection(server):
    for tool, args in (("memory_update", {"content": "overwritten by wren"}), ("memory_delete", {})):
        with pytest.raises(ToolCallError, match="no memory"):
            server.call_tool(tool, {"memory_id": server.kite_answer, "collection": "sessions", **args}, agent="wren")
    kept = server.call_tool("memory_get", {"memory_id": server.kite_answer, "collection": "sessions"}, agent="kite")
    assert kept["version"] == 1 and "rotated by the ops team" in kept["content"]
    # the same grant still works where it applies: kite's memory in the shared collection
    changed = server.call_tool("memory_update", {"memory_id": server.kite_memory, "tags": "albatross"}, agent="wren")
    assert changed["version"] == 2


# -- counting another agent's entries ---------------------------------------------------------------------

def test_collection_lists_and_stats_count_only_the_callers_own_entries(server):
    listed = {c["name"]: c for c in server.call_tool("memory_list_collections", {}, agent="wren")["collections"]}
    assert listed["sessions"] == {"name": "sessions", "count": 1, "private": True}
    stats = server.call_tool("memory_stats", {"collection": "sessions"}, agent="wren")
    assert stats["count"] == 1 and stats["authors"] == {"wren": 1} and "log_bytes" not in stats
    assert server.call_tool("memory_stats", {"collection": "sessions"}, agent="kite")["count"] == 2


def test_the_dashboard_shows_each_agent_only_its_own_turns(server):
    base = server.url.replace("/mcp", "/dashboard")
    with httpx2.Client(timeout=30, follow_redirects=False) as client:
        form = client.get(base + "/login")
        csrf = form.text.split('name="_csrf_token" value="', 1)[1].split('"', 1)[0]
        client.post(base + "/login", data={"token": server.tokens["wren"], "_csrf_token": csrf})
        listing = client.get(base + "/memories", params={"collection": "sessions"}).text
        found = client.get(base + "/memories", params={"collection": "sessions", "q": "albatross deploy key"}).text
        asked = client.get(base + "/memories", params={"collection": "sessions", "author": "kite"}).text
        overview = client.get(base + "/overview", params={"collection": "sessions"}).text
    assert "rotate it quarterly" in listing.lower() and "where does the albatross" not in listing
    assert "rotate it quarterly" in found.lower() and "where does the albatross" not in found
    assert "where does the albatross" not in asked and "rotate it quarterly" not in asked.lower()
    assert 'id="stat-memories">1<' in overview


# -- memory_search's include_sessions ---------------------------------------------------------------------

def test_include_sessions_merges_the_callers_own_turns_marked_as_turns(server):
    found = search(server, "kite", include_sessions=True, top_k=5)
    by_id = {r["id"]: r for r in found["results"]}
    assert server.kite_memory in by_id and server.kite_turn in by_id and server.wren_turn not in by_id
    turn = by_id[server.kite_turn]
    assert (turn["session_turn"], turn["session_id"], turn["index"], turn["client"], turn["role"]) == (
        True, "kite-s1", 0, "claude", "user")
    assert "session_turn" not in by_id[server.kite_memory]
    assert [r["score"] for r in found["results"]] == sorted((r["score"] for r in found["results"]), reverse=True)
    assert all(r["id"] not in (server.kite_turn, server.kite_answer) for r in search(server, "kite")["results"])


def test_include_sessions_never_brings_another_agents_turns(server):
    found = search(server, "wren", include_sessions=True, top_k=10)
    assert server.kite_turn not in {r["id"] for r in found["results"]}
    assert server.wren_turn in {r["id"] for r in found["results"]}


def test_include_sessions_keeps_the_reply_within_its_budget(server):
    capture_turns(server, "kite", "long-s", [f"albatross deploy key, long turn {n}: " +
                                              "the vault path and the rotation " * 150 for n in range(20)],
                  role="assistant")
    found = search(server, "kite", include_sessions=True, top_k=20)
    assert len(json.dumps(found, indent=2, ensure_ascii=False)) <= 10_000
    assert found["count"] >= 3 and any(r.get("session_turn") for r in found["results"])


def test_chorus_init_shows_no_other_agents_handoff_when_memories_are_private(tmp_path):
    write_config(tmp_path, {"memory": {"private_collections": ["sessions", "memories"]}})
    private = start_server(tmp_path, agents=("kite", "wren"))
    try:
        private.call_tool("memory_store", {"content": "Handoff: wren's half-done migration.", "project": "acme",
                                           "memory_type": "handoff"}, agent="wren")
        private.call_tool("memory_store", {"content": "Handoff: kite's release notes are drafted.", "project": "acme",
                                           "memory_type": "handoff"}, agent="kite")
        handoffs = private.call_tool("chorus_init", {"project": "acme"}, agent="kite")["handoffs"]
        assert [h["author"] for h in handoffs] == ["kite"]
    finally:
        private.stop()


def test_include_sessions_finds_turns_before_any_memory_was_stored(tmp_path):
    fresh = start_server(tmp_path, agents=("kite",))
    try:
        turn = store_turn(fresh, "kite", "first-day", KITE_TURN)
        found = search(fresh, "kite", include_sessions=True)
        assert [r["id"] for r in found["results"]] == [turn] and "hint" not in found
    finally:
        fresh.stop()


# -- choosing ids: squatting another agent's future turn, or probing for its turns ---------------------------

def refusal(server, agent, memory_id, tool="memory_store"):
    """What `agent` is told when it stores under `memory_id` in `sessions` (with the id itself left out)."""
    args = ({"content": "probe", "collection": "sessions", "memory_id": memory_id, "dedup": False}
            if tool == "memory_store" else
            {"chunks": [{"content": "probe", "id": memory_id}], "collection": "sessions", "dedup": False})
    with pytest.raises(ToolCallError) as refused:
        server.call_tool(tool, args, agent=agent)
    return str(refused.value).replace(memory_id, "ID")


@pytest.mark.parametrize("tool", ["memory_store", "memory_bulk_store"])
def test_an_id_chosen_in_a_private_collection_is_refused_the_same_whether_taken_or_not(server, tool):
    taken = refusal(server, "wren", server.kite_turn, tool)
    assert taken == refusal(server, "wren", turn_id("kite", "claude", "kite-s1", 9), tool)
    assert taken == refusal(server, "wren", "a-note-of-my-own", tool) == refusal(server, "kite", server.kite_turn, tool)
    assert "ids in a private collection are given by the server" in taken and "empty" in taken
    assert KITE_TURN in server.call_tool("memory_get", {"memory_id": server.kite_turn, "collection": "sessions"},
                                         agent="kite")["content"]


def test_a_future_turn_id_cannot_be_squatted_and_the_turn_is_indexed(server):
    future = turn_id("kite", "claude", "kite-s2", 0)
    refusal(server, "wren", future)
    assert store_turn(server, "kite", "kite-s2", "kite's turn about the puffin rollout") == future
    assert server.call_tool("memory_get", {"memory_id": future, "collection": "sessions"},
                            agent="kite")["author"] == "kite"


def test_storing_without_an_id_in_a_private_collection_still_works(server):
    stored = server.call_tool("memory_store", {"content": "wren's own note in sessions", "collection": "sessions",
                                               "dedup": False}, agent="wren")
    assert stored["status"] == "stored"
    server.call_tool("memory_delete", {"memory_id": stored["id"], "collection": "sessions"}, agent="wren")

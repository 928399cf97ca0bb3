"""session_list, session_read and session_search through a real MCP client against a server with the memory
plugin. Grouped by what each test refuses: another agent seeing kite's sessions (list, read, search, the capture
count), replies too big for an AI, and arguments that would crash or mislead."""

from __future__ import annotations

import json
import time

import pytest

from sessions_testkit import CLAUDE_SESSION, archived, capture, fixture_lines, serve, socket_client
from persmem_core.sdk.testing import ToolCallError, assert_tools_answer_clearly
from persmem_sessions.tools import REPLY_CHARS

LONG_SESSION = "long-session-1"


def long_lines(turns: int = 120) -> list[str]:
    return [json.dumps({"type": "user" if i % 2 == 0 else "assistant", "timestamp": f"2026-11-04T10:{i // 60:02d}:{i % 60:02d}Z",
                        "message": {"role": "user" if i % 2 == 0 else "assistant",
                                    "content": f"turn {i} about the cormorant migration plan. " + "detail " * 200}})
            for i in range(turns)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = serve(tmp_path_factory.mktemp("tools") / "home", memory=True)
    with socket_client(running.home, "kite") as http:
        assert capture(http, fixture_lines("claude_session.jsonl")).status_code == 200
        assert capture(http, long_lines(), session_id=LONG_SESSION, cwd="/home/dev/src/cormorant").status_code == 200
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if all(archived(running.home, "kite", "claude", s)[1]["indexed_lines"] == archived(running.home, "kite", "claude", s)[1]["lines"]
               for s in (CLAUDE_SESSION, LONG_SESSION)):
            break
        time.sleep(0.2)
    yield running
    running.stop()


class TestOnlyYourOwnSessions:
    def test_another_agent_lists_none_of_kites_sessions(self, server):
        assert server.call_tool("session_list", {}, agent="kite")["total"] == 2
        assert server.call_tool("session_list", {}, agent="wren") == {"sessions": [], "total": 0}

    def test_another_agent_cannot_read_kites_session(self, server):
        with pytest.raises(ToolCallError, match="you have no session"):
            server.call_tool("session_read", {"session_id": CLAUDE_SESSION}, agent="wren")

    def test_another_agent_never_finds_kites_turns(self, server):
        mine = server.call_tool("session_search", {"query": "webhook signature mismatch reconciliation"}, agent="kite")
        assert any(r["session_id"] == CLAUDE_SESSION for r in mine["results"])
        theirs = server.call_tool("session_search", {"query": "webhook signature mismatch reconciliation",
                                                     "session_id": CLAUDE_SESSION}, agent="wren")
        assert theirs["results"] == []

    def test_another_agent_sees_no_capture_count_and_cannot_add_to_kites_session(self, server):
        with socket_client(server.home, "wren") as http:
            assert http.get(f"/sessions/capture/claude/{CLAUDE_SESSION}").json() == {"lines": 0}
            assert capture(http, ['{"type":"summary"}']).status_code == 200  # wren's own session of that id
        _, meta = archived(server.home, "kite", "claude", CLAUDE_SESSION)
        assert meta["lines"] == len(fixture_lines("claude_session.jsonl"))


class TestRepliesSizedForAnAI:
    def test_list_shows_titles_projects_and_filters(self, server):
        listed = server.call_tool("session_list", {"project": "cormorant"}, agent="kite")
        assert [s["session_id"] for s in listed["sessions"]] == [LONG_SESSION]
        [billing] = server.call_tool("session_list", {"project": "billing-api"}, agent="kite")["sessions"]
        assert billing["title"].startswith("The webhook tests fail") and billing["client"] == "claude"

    def test_read_cuts_long_turns_stays_in_budget_and_continues(self, server):
        first = server.call_tool("session_read", {"session_id": LONG_SESSION, "limit": 200}, agent="kite")
        assert len(json.dumps(first, indent=2)) <= REPLY_CHARS + 2000
        assert first["total_turns"] == 120 and 0 < len(first["turns"]) < 120
        assert first["next_offset"] == first["turns"][-1]["index"] + 1
        following = server.call_tool("session_read", {"session_id": LONG_SESSION, "offset": first["next_offset"],
                                                      "limit": 1}, agent="kite")
        assert following["turns"][0]["index"] == first["next_offset"]
        assert following["turns"][0]["text"].startswith(f"turn {first['next_offset']} about")

    def test_read_shows_tool_calls_results_and_redactions(self, server):
        turns = server.call_tool("session_read", {"session_id": CLAUDE_SESSION}, agent="kite")["turns"]
        assert [t["role"] for t in turns][:4] == ["user", "assistant", "tool", "tool"]
        assert "[REDACTED:stripe_key]" in turns[3]["text"]

    def test_search_hits_are_cut_and_point_to_the_session(self, server):
        hits = server.call_tool("session_search", {"query": "cormorant migration plan", "top_k": 20},
                                agent="kite")["results"]
        assert hits and all(h["session_id"] == LONG_SESSION and len(h["text"]) < 700 for h in hits)
        assert all(isinstance(h["index"], int) for h in hits)

    def test_a_word_said_nowhere_finds_nothing_and_says_so(self, server):
        # the relative floor alone kept the best unrelated turns (~0.36): a query no turn is about finds none
        reply = server.call_tool("session_search", {"query": "xylophonist"}, agent="kite")
        assert reply["results"] == [] and "No turn of your sessions is about this" in reply["note"]
        found = server.call_tool("session_search", {"query": "cormorant"}, agent="kite")
        assert found["results"] and "note" not in found


class TestArgumentsAnsweredClearly:
    def test_bad_arguments_get_clear_errors_and_the_server_stays_up(self, server):
        results = assert_tools_answer_clearly(server, [
            ("session_list", {"limit": 0}), ("session_list", {"limit": 10_000}), ("session_list", {"project": "x" * 5000}),
            ("session_read", {"session_id": "../../x"}), ("session_read", {"session_id": ""}),
            ("session_read", {"session_id": LONG_SESSION, "offset": -1}),
            ("session_read", {"session_id": LONG_SESSION, "limit": 0}),
            ("session_read", {"session_id": LONG_SESSION, "offset": 10_000}),
            ("session_search", {"query": ""}), ("session_search", {"query": "x", "top_k": 50}),
            ("session_search", {"query": "x", "session_id": "a/b"}), ("session_search", {"query": "q" * 100_000}),
        ], agent="kite")
        assert sum(r.is_error for r in results) >= 9

"""Capture through a real server, as the client hooks do it: over the owner's socket (X-Persmem-Agent) and over
TCP (bearer token). Grouped by what each test refuses: a capture that is lost, stored twice, readable by others
or indexed only once the server happens to stay up; and hostile requests that would crash the server, escape
the archive folder or exhaust it."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import httpx2
import pytest

from sessions_testkit import (CLAUDE_SESSION, CODEX_SESSION, archived, capture, fixture_lines, read_record, serve,
                      socket_client)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("capture")
    running = serve(home / "home", record=home / "indexed.jsonl")
    running.record = home / "indexed.jsonl"
    yield running
    running.stop()


def wait_for(condition, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


class TestCaptureIsKept:
    def test_capture_over_socket_archives_every_line_privately(self, server):
        lines = fixture_lines("claude_session.jsonl")
        with socket_client(server.home, "kite") as http:
            assert http.get(f"/sessions/capture/claude/{CLAUDE_SESSION}").json() == {"lines": 0}
            reply = capture(http, lines)
            assert reply.status_code == 200, reply.text
            assert reply.json() == {"archived": len(lines), "total_lines": len(lines), "redactions": 13,
                                    "project": "billing-api"}
            assert http.get(f"/sessions/capture/claude/{CLAUDE_SESSION}").json() == {"lines": len(lines)}
        text, meta = archived(server.home, "kite", "claude", CLAUDE_SESSION)
        assert len(text.splitlines()) == len(lines)
        assert meta["lines"] == len(lines) and meta["redactions"] == 13 and meta["project"] == "billing-api"
        assert meta["title"].startswith("The webhook tests fail") and meta["sha256"]
        folder = server.home / "sessions" / "kite" / "billing-api"
        for path in (server.home / "sessions", server.home / "sessions" / "kite", folder):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o700, path
        for path in folder.iterdir():
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path

    def test_capture_over_tcp_needs_the_agents_token(self, server):
        lines = fixture_lines("codex_rollout.jsonl")
        body = {"client": "codex", "session_id": CODEX_SESSION, "cwd": "/home/dev/src/infra", "first_line": 0,
                "lines": lines, "event": "Stop"}
        refused = httpx2.post(f"{server.base_url}/sessions/capture", json=body, timeout=30)
        assert refused.status_code == 401
        reply = httpx2.post(f"{server.base_url}/sessions/capture", json=body, headers=server.headers("wren"),
                            timeout=30)
        assert reply.status_code == 200, reply.text
        assert reply.json()["project"] == "infra" and reply.json()["redactions"] == 4
        text, _ = archived(server.home, "wren", "codex", CODEX_SESSION)
        assert len(text.splitlines()) == len(lines)

    def test_indexing_hands_every_turn_to_the_memory_side_once(self, server):
        wait_for(lambda: any(call["agent"] == "kite" for call in read_record(server.record)))
        turns = [turn for call in read_record(server.record) if call["agent"] == "kite"
                 for turn in call["turns"] if turn["session_id"] == CLAUDE_SESSION]
        assert [t["index"] for t in turns] == list(range(len(turns)))
        assert {t["role"] for t in turns} == {"user", "assistant", "tool"}
        assert all(t["project"] == "billing-api" and t["client"] == "claude" for t in turns)
        _, meta = archived(server.home, "kite", "claude", CLAUDE_SESSION)
        assert meta["indexed_lines"] == meta["lines"] and meta["indexed_turns"] == len(turns) == meta["turns"]


class TestCaptureStoredOnce:
    def test_the_same_session_twice_stores_nothing_new(self, server):
        lines = fixture_lines("claude_session.jsonl")
        with socket_client(server.home, "kite") as http:
            capture(http, lines)  # archived by the first test, or now
            before, meta_before = archived(server.home, "kite", "claude", CLAUDE_SESSION)
            again = capture(http, lines)
            assert again.status_code == 409
            assert again.json()["lines"] == len(lines) and "send the lines from" in again.json()["error"]
            resent = capture(http, lines[again.json()["lines"]:], first_line=again.json()["lines"])
            assert resent.json()["archived"] == 0
        after, meta_after = archived(server.home, "kite", "claude", CLAUDE_SESSION)
        assert after == before and meta_after["archive_bytes"] == meta_before["archive_bytes"]
        assert meta_after["sha256"] == meta_before["sha256"]

    def test_incremental_captures_give_the_same_turns_as_one(self, server):
        lines = fixture_lines("claude_session.jsonl")
        with socket_client(server.home, "kite") as http:
            for start, end in ((0, 4), (4, 5), (5, 11), (11, len(lines))):
                reply = capture(http, lines[start:end], session_id="incremental-1", first_line=start)
                assert reply.json()["total_lines"] == end
            whole = capture(http, lines, session_id="whole-1")
            assert whole.status_code == 200
        pieces, meta_pieces = archived(server.home, "kite", "claude", "incremental-1")
        one, meta_one = archived(server.home, "kite", "claude", "whole-1")
        assert pieces == one and meta_pieces["turns"] == meta_one["turns"]
        assert meta_pieces["redactions"] == meta_one["redactions"] == 13


class TestCaptureSurvivesCrashes:
    def test_a_capture_that_returned_survives_kill_9_and_indexing_resumes(self, tmp_path, recorded):
        lines = fixture_lines("codex_rollout.jsonl")
        failing = Path(str(recorded) + ".fail")
        failing.touch()  # the memory side is down: nothing gets indexed before the crash
        first = serve(tmp_path / "home", record=recorded)
        try:
            with socket_client(first.home, "kite") as http:
                assert capture(http, lines, session_id=CODEX_SESSION, client="codex").status_code == 200
            first.kill()
        finally:
            first.stop()
        text, meta = archived(first.home, "kite", "codex", CODEX_SESSION)
        assert len(text.splitlines()) == len(lines) and meta["indexed_lines"] == 0
        failing.unlink()
        second = serve(first.home, agents=(), record=recorded)
        try:
            with socket_client(second.home, "kite") as http:
                assert http.get(f"/sessions/capture/codex/{CODEX_SESSION}").json() == {"lines": len(lines)}
            wait_for(lambda: archived(second.home, "kite", "codex", CODEX_SESSION)[1]["indexed_lines"] == len(lines))
        finally:
            second.stop()
        turns = [t for call in read_record(recorded) for t in call["turns"]]
        assert [t["index"] for t in turns] == list(range(meta["turns"]))
        assert turns[0]["text"].startswith("Why does the staging terraform plan")

    def test_a_member_a_crash_left_without_metadata_is_never_read(self, tmp_path):
        server = serve(tmp_path / "home")
        try:
            with socket_client(server.home, "kite") as http:
                capture(http, ['{"type":"summary","summary":"one"}'], session_id="torn")
                [gz] = (server.home / "sessions" / "kite").glob("*/claude-torn.jsonl.gz")
                with open(gz, "ab") as f:  # what a capture killed between archive and metadata leaves
                    f.write(b"\x1f\x8b\x08\x00garbage")
                assert http.get("/sessions/capture/claude/torn").json() == {"lines": 1}
                reply = capture(http, ['{"type":"summary","summary":"two"}'], session_id="torn", first_line=1)
                assert reply.json()["total_lines"] == 2
        finally:
            server.stop()
        text, _ = archived(server.home, "kite", "claude", "torn")
        assert [json.loads(line)["summary"] for line in text.splitlines()] == ["one", "two"]


class TestHostileCaptures:
    @pytest.mark.parametrize("session_id", ["../../x", "a/b", "", "x" * 129, "sess ion", "ünïcode", "..\\..\\x"])
    def test_session_ids_that_are_not_names_are_refused(self, server, session_id):
        with socket_client(server.home, "kite") as http:
            reply = capture(http, ['{"type":"summary"}'], session_id=session_id)
            assert reply.status_code == 400 and "session_id" in reply.json()["error"]
        assert not list((server.home / "sessions").rglob("*x.jsonl.gz"))
        assert not (server.home / "x.jsonl.gz").exists() and not (server.home.parent / "x.jsonl.gz").exists()

    @pytest.mark.parametrize("path", ["claude/..%2F..%2Fx", "claude/a/b", "cursor/abc", "claude/" + "x" * 129])
    def test_line_count_paths_that_are_not_names_are_refused(self, server, path):
        with socket_client(server.home, "kite") as http:
            reply = http.get(f"/sessions/capture/{path}")
        assert reply.status_code == 400 and "session_id" in reply.json()["error"]

    @pytest.mark.parametrize("body", [
        {"client": "claude", "session_id": "t1", "first_line": "0", "lines": []},
        {"client": "claude", "session_id": "t1", "first_line": -1, "lines": []},
        {"client": "claude", "session_id": "t1", "first_line": 0, "lines": "one line"},
        {"client": "claude", "session_id": "t1", "first_line": 0, "lines": [1, 2]},
        {"client": "claude", "session_id": "t1", "first_line": 0, "lines": [{"type": "user"}]},
        {"client": "cursor", "session_id": "t1", "first_line": 0, "lines": []},
        {"client": "claude", "session_id": "t1", "lines": []},
        {"client": "claude", "session_id": "t1", "first_line": 0, "lines": [], "cwd": 7},
        {"client": "claude", "session_id": "t1", "first_line": 0, "lines": [], "surprise": True},
        ["claude", "t1", 0, []],
        "capture please",
    ])
    def test_wrong_types_get_400_naming_the_field(self, server, body):
        with socket_client(server.home, "kite") as http:
            reply = http.post("/sessions/capture", json=body)
        assert reply.status_code == 400, reply.text
        assert reply.json()["error"].startswith("invalid capture request") and "Traceback" not in reply.text

    def test_not_json_and_split_lines_get_400(self, server):
        with socket_client(server.home, "kite") as http:
            assert http.post("/sessions/capture", content=b"\xff{not json").status_code == 400
            split = capture(http, ['{"type":"user"}\n{"type":"assistant"}'], session_id="split")
            assert split.status_code == 400 and "line break" in split.json()["error"]
            assert http.get("/sessions/capture/claude/split").json() == {"lines": 0}

    def test_a_line_over_the_body_limit_gets_413_naming_the_setting(self, server):
        with socket_client(server.home, "kite") as http:
            reply = capture(http, ['{"type":"user","message":{"content":"' + "A" * 5_000_000 + '"}}'],
                            session_id="huge")
            assert reply.status_code == 413
            assert "max_body_bytes" in reply.json()["error"]["message"]
            assert http.get("/sessions/capture/claude/huge").json() == {"lines": 0}

    def test_a_2_mb_line_under_the_limit_is_archived_whole(self, server):
        """A screenshot in a tool result makes a line of megabytes: it must not block the session's capture."""
        line = json.dumps({"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR" * 400_000}}]}]}})
        with socket_client(server.home, "kite") as http:
            assert capture(http, [line], session_id="screenshot").status_code == 200
        text, meta = archived(server.home, "kite", "claude", "screenshot")
        assert text == line + "\n" and meta["turns"] == 1

    def test_a_5_mb_batch_gets_413_and_the_server_stays_up(self, server):
        lines = ['{"type":"assistant","message":{"content":"' + "B" * 10_000 + '"}}'] * 500
        with socket_client(server.home, "kite") as http:
            reply = capture(http, lines, session_id="batch5mb")
            assert reply.status_code == 413 and "too large" in reply.text
        over_tcp = httpx2.post(f"{server.base_url}/sessions/capture", headers=server.headers("kite"), timeout=60,
                               json={"client": "claude", "session_id": "batch5mb", "first_line": 0, "lines": lines})
        assert over_tcp.status_code == 413
        assert httpx2.get(f"{server.base_url}/healthz", timeout=10).status_code == 200
        with socket_client(server.home, "kite") as http:
            assert capture(http, ['{"type":"summary"}'], session_id="after-hostile").status_code == 200
            assert http.get("/sessions/capture/claude/batch5mb").json() == {"lines": 0}

    def test_an_unknown_agent_on_the_socket_is_refused(self, server):
        with socket_client(server.home, "nobody") as http:
            reply = capture(http, ['{"type":"summary"}'], session_id="intruder")
        assert reply.status_code == 403
        assert not (server.home / "sessions" / "nobody").exists()

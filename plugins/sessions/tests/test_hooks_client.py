"""The hooks as Claude Code and Codex run them: the command `persmem hooks install` wrote into settings.json /
hooks.json, run with `bash -c`, the event's JSON on stdin, the client's environment and the timeout from the
file, against a real `persmem serve` with the memory plugin (recall, briefing) and the sessions plugin (capture).
Grouped by what each test refuses: a briefing without the handoff or over its budget, a recall that misses or
repeats, a hook that fails the client (output, exit code, time) when the server is down, slow or answers
nonsense, and a capture that stores a line twice or none."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx2
import pytest

from persmem_core.sdk import socket_path as core_socket_path
from persmem_core.sdk.testing import clean_env, start_server
from sessions_testkit import plugin_env

PERSMEM = Path(sys.executable).parent / "persmem"
MODULE = "persmem_sessions.hook"
HANDOFF = ("Handoff for proj-alpha: the importer's retry loop is fixed; next step is the flaky "
           "test_backfill_progress_bar on slow disks.")
MEMORY = ("Decision: the heron service stores its thumbnails in the cold-storage bucket 'heron-thumbs' with a "
          "30 day lifecycle rule.")



class Client:
    """One user machine: Claude Code's and Codex's config folders with the hooks installed, a project folder."""

    def __init__(self, root: Path, persmem_home: Path, agent: str | None):
        self.home = root / "me"
        self.claude, self.codex = self.home / ".claude", self.home / ".codex"
        for folder in (self.claude, self.codex):
            folder.mkdir(parents=True)
        self.project = root / "proj-alpha"
        self.project.mkdir()
        # what the client passes its hooks: its own environment (no PERSMEM_*), the user's HOME
        self.env = clean_env(persmem_home, HOME=str(self.home), CLAUDE_CONFIG_DIR=str(self.claude),
                             CODEX_HOME=str(self.codex), **plugin_env())
        installed = subprocess.run([str(PERSMEM), "hooks", "install", "--target", "all",
                                    *(["--agent", agent] if agent else [])],
                                   env=self.env, capture_output=True, text=True, timeout=60)
        assert installed.returncode == 0, installed.stderr
        self.env.pop("PERSMEM_HOME")  # the hook finds the home in its command, not in the client's environment

    def handler(self, client: str, event: str) -> dict:
        settings = self.claude / "settings.json" if client == "claude" else self.codex / "hooks.json"
        hooks = json.loads(settings.read_text())["hooks"][event]
        [ours] = [h for group in hooks for h in group["hooks"] if MODULE in h["command"]]
        return ours

    def run(self, client: str, event: str, session_id: str, **fields) -> tuple[subprocess.CompletedProcess, float]:
        """Run the installed hook for `event` as the client does; returns the process and its wall time."""
        handler = self.handler(client, event)
        payload = {"session_id": session_id, "transcript_path": None, "cwd": str(self.project),
                   "hook_event_name": event, "permission_mode": "default"} | fields
        started = time.monotonic()
        done = subprocess.run(["bash", "-c", handler["command"]], input=json.dumps(payload), env=self.env,
                              cwd=self.project, capture_output=True, text=True, timeout=handler["timeout"])
        return done, time.monotonic() - started


def context_of(done: subprocess.CompletedProcess, event: str) -> str:
    assert done.returncode == 0 and done.stderr == ""
    if not done.stdout:
        return ""
    output = json.loads(done.stdout)
    assert output["hookSpecificOutput"]["hookEventName"] == event
    return output["hookSpecificOutput"]["additionalContext"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("hooks-home")
    running = start_server(home, agents=("kite",), env=clean_env(home, **plugin_env()))
    running.call_tool("memory_store", {"content": HANDOFF, "memory_type": "handoff", "project": "proj-alpha"},
                      agent="kite")
    running.call_tool("memory_store", {"content": MEMORY, "memory_type": "decision", "project": "heron"},
                      agent="kite")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def machine(server, tmp_path_factory):
    return Client(tmp_path_factory.mktemp("client"), server.home, agent="kite")


def archived_lines(server, client: str, session_id: str) -> int:
    """The server's count, asked over TCP with kite's token as a second opinion to the hook's own GET."""
    answer = httpx2.get(f"{server.base_url}/sessions/capture/{client}/{session_id}", headers=server.headers("kite"))
    assert answer.status_code == 200, answer.text
    return answer.json()["lines"]


# -- a briefing without the handoff, or over its budget -----------------------------------------------------------


@pytest.mark.parametrize("client", ["claude", "codex"])
def test_session_start_briefs_with_the_stored_handoff_within_the_budget(server, machine, client):
    done, _ = machine.run(client, "SessionStart", str(uuid.uuid4()), source="startup")
    context = context_of(done, "SessionStart")
    assert "importer's retry loop is fixed" in context
    assert len(context) <= 2000 * 4  # [sessions] briefing_tokens, about 4 characters each


# -- a recall that misses, or repeats -----------------------------------------------------------------------------


def test_a_prompt_gets_its_relevant_memory_once_per_session(server, machine):
    session = str(uuid.uuid4())
    prompt = "Where does the heron service keep its thumbnails, which bucket?"
    first, _ = machine.run("claude", "UserPromptSubmit", session, prompt=prompt)
    assert "heron-thumbs" in context_of(first, "UserPromptSubmit")
    again, _ = machine.run("claude", "UserPromptSubmit", session, prompt=prompt + " And the lifecycle?")
    assert "heron-thumbs" not in context_of(again, "UserPromptSubmit")
    other, _ = machine.run("claude", "UserPromptSubmit", str(uuid.uuid4()), prompt=prompt)
    assert "heron-thumbs" in context_of(other, "UserPromptSubmit")  # another session has not seen it


# -- a capture that stores a line twice, or none ------------------------------------------------------------------


def claude_lines(session_id: str, cwd: str, start: int, count: int) -> list[str]:
    """Claude Code transcript lines (format of Claude Code 2.0: one JSON object per line, user and assistant
    messages with uuid / parentUuid chains, tool use and tool result blocks)."""
    lines, parent = [], None
    for n in range(start, start + count):
        common = {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": cwd,
                  "sessionId": session_id, "version": "2.0.14", "gitBranch": "main",
                  "uuid": str(uuid.uuid4()), "timestamp": f"2026-11-20T10:{n // 60:02d}:{n % 60:02d}.000Z"}
        if n % 2 == 0:
            line = common | {"type": "user", "message": {"role": "user", "content": f"Question {n}: what next?"}}
        else:
            line = common | {"type": "assistant", "requestId": f"req_{n}", "message": {
                "id": f"msg_{n}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": f"Answer {n}: run the tests."},
                            {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash",
                             "input": {"command": "pytest -q"}}],
                "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}}}
        parent = line["uuid"]
        lines.append(json.dumps(line))
    return lines


def test_capturing_the_same_session_twice_stores_nothing_new(server, machine, tmp_path):
    session = str(uuid.uuid4())
    transcript = tmp_path / f"{session}.jsonl"
    transcript.write_text("\n".join(claude_lines(session, str(machine.project), 0, 6)) + "\n")
    first, _ = machine.run("claude", "Stop", session, transcript_path=str(transcript), stop_hook_active=False)
    assert first.returncode == 0 and first.stdout == ""
    assert archived_lines(server, "claude", session) == 6
    again, _ = machine.run("claude", "SessionEnd", session, transcript_path=str(transcript), reason="exit")
    assert again.returncode == 0 and archived_lines(server, "claude", session) == 6

    with transcript.open("a") as more:  # the session went on: only the new lines go, a half-written one waits
        more.write("\n".join(claude_lines(session, str(machine.project), 6, 3)) + "\n" + '{"type": "us')
    machine.run("claude", "PreCompact", session, transcript_path=str(transcript), trigger="auto")
    assert archived_lines(server, "claude", session) == 9


def test_a_transcript_larger_than_one_request_goes_in_batches_and_a_huge_line_still_counts(server, machine, tmp_path):
    session = str(uuid.uuid4())
    big = json.dumps({"type": "user", "sessionId": session, "cwd": str(machine.project),
                      "timestamp": "2026-11-20T11:00:00.000Z", "uuid": str(uuid.uuid4()),
                      "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                               "content": "x" * 700_000}]}})
    transcript = tmp_path / f"{session}.jsonl"
    transcript.write_text("\n".join(claude_lines(session, str(machine.project), 0, 2) + [big] * 4) + "\n")
    done, _ = machine.run("claude", "Stop", session, transcript_path=str(transcript))
    assert done.returncode == 0 and archived_lines(server, "claude", session) == 6


def test_codex_without_a_transcript_path_captures_its_rollout_found_by_session_id(server, machine):
    session = str(uuid.uuid4())
    day = machine.codex / "sessions" / "2026" / "11" / "20"
    day.mkdir(parents=True)
    meta = {"timestamp": "2026-11-20T09:00:00.000Z", "type": "session_meta", "payload": {
        "id": session, "timestamp": "2026-11-20T09:00:00.000Z", "cwd": str(machine.project),
        "originator": "codex_cli_rs", "cli_version": "0.63.0"}}
    turns = [{"timestamp": "2026-11-20T09:00:01.000Z", "type": "response_item", "payload": {
                 "type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]}},
             {"timestamp": "2026-11-20T09:00:02.000Z", "type": "response_item", "payload": {
                 "type": "function_call", "name": "shell", "arguments": '{"command":["ls"]}', "call_id": "call_1"}},
             {"timestamp": "2026-11-20T09:00:03.000Z", "type": "response_item", "payload": {
                 "type": "function_call_output", "call_id": "call_1", "output": '{"output":"README.md\\n"}'}}]
    (day / f"rollout-2026-11-20T09-00-00-{session}.jsonl").write_text(
        "\n".join(json.dumps(line) for line in [meta, *turns]) + "\n")
    (day / "rollout-2026-11-20T08-00-00-some-other-session.jsonl").write_text(json.dumps(meta) + "\n")
    done, _ = machine.run("codex", "Stop", session, turn_id="t1")
    assert done.returncode == 0 and done.stdout == ""
    assert archived_lines(server, "codex", session) == 4


# -- a hook that fails the client: the server down, slow, or answering nonsense -----------------------------------


@pytest.fixture(scope="module")
def no_server(tmp_path_factory):
    """The same hooks installed for a home no server runs for."""
    root = tmp_path_factory.mktemp("idle")
    (root / "idle-home").mkdir()
    return Client(root, root / "idle-home", agent=None)


@pytest.mark.parametrize("client", ["claude", "codex"])
@pytest.mark.parametrize("event, fields", [("SessionStart", {"source": "startup"}),
                                           ("UserPromptSubmit", {"prompt": "what did we decide?"}),
                                           ("Stop", {"transcript_path": "/nonexistent.jsonl"}),
                                           ("SessionEnd", {"reason": "exit"})])
def test_server_down_exits_0_with_no_output_fast(no_server, client, event, fields):
    done, seconds = no_server.run(client, event, str(uuid.uuid4()), **fields)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert seconds < 1.0


def hung_server(path: str):
    """A listener that accepts and never answers (a server stuck in a long request)."""
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(16)
    held = []

    def accept():
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    return listener, held


@pytest.mark.parametrize("event, fields, deadline", [("SessionStart", {"source": "startup"}, 3.0),
                                                     ("UserPromptSubmit", {"prompt": "hello"}, 1.5),
                                                     ("SessionEnd", {"reason": "exit"}, 2.0)])
def test_a_server_that_never_answers_costs_at_most_the_hooks_deadline(no_server, tmp_path, event, fields, deadline):
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"type": "user"}\n')
    sock = core_socket_path(no_server.project.parent / "idle-home")
    listener, held = hung_server(str(sock))
    try:
        done, seconds = no_server.run("codex", event, "s1", transcript_path=str(transcript), **fields)
    finally:
        listener.close()
        sock.unlink()
        for conn in held:
            conn.close()
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert deadline - 0.1 < seconds < no_server.handler("codex", event)["timeout"]  # process start on top


@pytest.mark.parametrize("stdin", ["", "not json", "[1, 2]", '{"hook_event_name": "SessionStart"}',
                                   '{"session_id": "s", "hook_event_name": "PreToolUse"}'])
def test_nonsense_on_stdin_exits_0_silently(machine, stdin):
    handler = machine.handler("claude", "SessionStart")
    done = subprocess.run(["bash", "-c", handler["command"]], input=stdin, env=machine.env, capture_output=True,
                          text=True, timeout=handler["timeout"])
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_refusal_is_silent_and_debug_says_one_short_line(server, machine):
    handler = machine.handler("claude", "SessionStart")
    bad_id = {"session_id": "../../etc/passwd", "hook_event_name": "SessionStart", "cwd": str(machine.project)}
    quiet = subprocess.run(["bash", "-c", handler["command"]], input=json.dumps(bad_id), env=machine.env,
                           capture_output=True, text=True, timeout=handler["timeout"])
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    loud = subprocess.run(["bash", "-c", handler["command"]], input=json.dumps(bad_id),
                          env=machine.env | {"PERSMEM_HOOK_DEBUG": "1"}, capture_output=True, text=True,
                          timeout=handler["timeout"])
    assert loud.returncode == 0 and loud.stdout == ""
    assert loud.stderr.count("\n") == 1 and "HTTP 400" in loud.stderr and len(loud.stderr) < 300


def test_an_unknown_agent_on_the_socket_is_silent(server, machine, tmp_path):
    command = machine.handler("claude", "SessionStart")["command"].replace("--agent kite", "--agent ghost")
    done = subprocess.run(["bash", "-c", command], input=json.dumps({
        "session_id": "s2", "hook_event_name": "SessionStart", "cwd": str(machine.project)}),
        env=machine.env, capture_output=True, text=True, timeout=5)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


# -- over HTTP with a token, for a server on another machine ------------------------------------------------------


def test_the_hook_reaches_a_server_over_http_with_the_token_in_its_environment(server, machine):
    event = json.dumps({"session_id": str(uuid.uuid4()), "hook_event_name": "SessionStart", "source": "startup",
                        "cwd": str(machine.project)})
    command = [sys.executable, "-m", MODULE, "--client", "claude", "--url", server.base_url]
    env = machine.env
    with_token = subprocess.run(command, input=event, env=env | {"PERSMEM_TOKEN": server.tokens["kite"]},
                                capture_output=True, text=True, timeout=5)
    assert "importer's retry loop is fixed" in context_of(with_token, "SessionStart")
    wrong = subprocess.run(command, input=event, env=env | {"PERSMEM_TOKEN": "pm_wrong"}, capture_output=True,
                           text=True, timeout=5)
    assert (wrong.returncode, wrong.stdout, wrong.stderr) == (0, "", "")


# -- the socket the hook computes is the one the server listens on ------------------------------------------------


@pytest.mark.parametrize("length", [10, 200])
def test_the_hooks_socket_path_is_the_cores(tmp_path, length, monkeypatch):
    from persmem_sessions.hook import socket_path

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    home = tmp_path / ("h" * length)
    assert socket_path(str(home), os.environ) == str(core_socket_path(home))

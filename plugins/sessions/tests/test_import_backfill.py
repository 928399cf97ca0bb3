"""`persmem sessions import` run as a user runs it, against a real `persmem serve` (and alone, holding the home):
a backfill of 1,000 Claude Code and Codex sessions written in tmp_path in the clients' own formats (Claude Code
2.0 transcripts, Codex 0.46 rollouts and the older header-line rollouts), then the same import again. Grouped by
what each test refuses: a backfill that stores a line twice or misses one, a bad file that stops the import or
prints a traceback, and an import that cannot run without a server."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import httpx2
import pytest

from persmem_core.sdk.testing import RunningServer, clean_env, free_port, start_server
from sessions_testkit import archived as session_text
from sessions_testkit import session_metas
from sessions_testkit import plugin_env

PERSMEM = Path(sys.executable).parent / "persmem"
SECRET = "sk-ant-api03-" + "Zq7" * 30  # an Anthropic API key's shape



# -- transcripts in the clients' formats ------------------------------------------------------------------------

def _jsonl(records: list[dict]) -> str:
    return "".join(json.dumps(record) + "\n" for record in records)


def claude_transcript(projects: Path, cwd: str, prompt: str, answer: str, session_id: str | None = None) -> Path:
    """A Claude Code 2.0 transcript: summary, user prompt, assistant text + Bash tool_use, the tool_result."""
    session_id = session_id or str(uuid.uuid4())
    common = {"isSidechain": False, "userType": "external", "cwd": cwd, "sessionId": session_id,
              "version": "2.0.14", "gitBranch": "main"}
    user, reply, result = (str(uuid.uuid4()) for _ in range(3))
    tool = f"toolu_01{uuid.uuid4().hex[:22]}"
    records = [
        {"type": "summary", "summary": prompt[:40], "leafUuid": result},
        {"parentUuid": None, **common, "type": "user", "message": {"role": "user", "content": prompt},
         "uuid": user, "timestamp": "2025-10-12T09:14:03.120Z"},
        {"parentUuid": user, **common, "type": "assistant", "requestId": "req_011CTx",
         "message": {"id": "msg_01Vq", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
                     "content": [{"type": "text", "text": answer},
                                 {"type": "tool_use", "id": tool, "name": "Bash",
                                  "input": {"command": "pytest -q tests/test_retry.py", "description": "Run tests"}}],
                     "stop_reason": "tool_use", "usage": {"input_tokens": 1200, "output_tokens": 85}},
         "uuid": reply, "timestamp": "2025-10-12T09:14:09.004Z"},
        {"parentUuid": reply, **common, "type": "user",
         "message": {"role": "user", "content": [{"tool_use_id": tool, "type": "tool_result",
                                                  "content": "3 passed in 0.41s", "is_error": False}]},
         "toolUseResult": {"stdout": "3 passed in 0.41s", "stderr": "", "interrupted": False, "isImage": False},
         "uuid": result, "timestamp": "2025-10-12T09:14:12.530Z"},
    ]
    folder = projects / ("-" + cwd.strip("/").replace("/", "-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    path.write_text(_jsonl(records))
    return path


def codex_rollout(codex_home: Path, cwd: str, prompt: str, answer: str, session_id: str | None = None,
                  old_format: bool = False) -> Path:
    """A Codex rollout: 0.46's typed lines (session_meta, response_item, turn_context, event_msg), or the
    format before 0.4x (a header line with the id, then bare items)."""
    session_id = session_id or str(uuid.uuid4())
    ts = "2025-10-13T16:02:11.412Z"
    environment = (f"<environment_context>\n  <cwd>{cwd}</cwd>\n  <approval_policy>on-request</approval_policy>\n"
                   "  <sandbox_mode>workspace-write</sandbox_mode>\n</environment_context>")
    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": environment}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]},
        {"type": "function_call", "name": "shell", "call_id": "call_7Hq2",
         "arguments": json.dumps({"command": ["bash", "-lc", "rg -n retry src/"], "workdir": cwd})},
        {"type": "function_call_output", "call_id": "call_7Hq2",
         "output": json.dumps({"output": "src/jobs.py:12:    retry(3)", "metadata": {"exit_code": 0,
                                                                                  "duration_seconds": 0.2}})},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]},
    ]
    if old_format:
        records = [{"id": session_id, "timestamp": ts, "instructions": None,
                    "git": {"commit_hash": "4f1c2a9", "branch": "main"}}, *items, {"record_type": "state"}]
    else:
        records = [{"timestamp": ts, "type": "session_meta",
                    "payload": {"id": session_id, "timestamp": ts, "cwd": cwd, "originator": "codex_cli_rs",
                                "cli_version": "0.46.0", "instructions": None, "source": "cli",
                                "git": {"commit_hash": "4f1c2a9", "branch": "main"}}},
                   {"timestamp": ts, "type": "response_item", "payload": items[0]},
                   {"timestamp": ts, "type": "turn_context",
                    "payload": {"cwd": cwd, "approval_policy": "on-request", "model": "gpt-5-codex",
                                "sandbox_policy": {"mode": "workspace-write"}, "summary": "auto"}},
                   {"timestamp": ts, "type": "response_item", "payload": items[1]},
                   {"timestamp": ts, "type": "event_msg",
                    "payload": {"type": "user_message", "message": prompt, "kind": "plain"}},
                   *({"timestamp": ts, "type": "response_item", "payload": item} for item in items[2:])]
    day = codex_home / "sessions" / "2025" / "10" / "13"
    day.mkdir(parents=True, exist_ok=True)
    path = day / f"rollout-2025-10-13T16-02-11-{session_id}.jsonl"
    path.write_text(_jsonl(records))
    return path


def machine(root: Path, sessions: int) -> tuple[Path, Path, dict[str, int]]:
    """A user's ~/.claude/projects and ~/.codex with `sessions` transcripts, half of each client (a tenth of the
    Codex ones in the old format); returns the two folders and each session's line count."""
    projects, codex_home = root / ".claude" / "projects", root / ".codex"
    lines = {}
    for i in range(sessions):
        cwd = f"/home/me/src/{['billing', 'infra', 'heron', 'atlas'][i % 4]}"
        prompt = f"Why does the nightly job {i} retry forever? The token was {SECRET}" if i == 7 else \
            f"Why does the nightly job {i} retry forever?"
        answer = f"Job {i} retries because its backoff never resets; I'll check the tests."
        if i % 2:
            path = claude_transcript(projects, cwd, prompt, answer)
        else:
            path = codex_rollout(codex_home, cwd, prompt, answer, old_format=i % 20 == 0)
        lines[path.stem[-36:]] = len(path.read_text().splitlines())
    return projects, codex_home, lines


def bad_files(projects: Path, codex_home: Path) -> list[Path]:
    """Files where transcripts live that are not transcripts: plain text, binary, a folder named like one."""
    folder = projects / "-home-me-src-junk"
    folder.mkdir(parents=True)
    (folder / "notes.jsonl").write_text("remember to rotate the keys\n")
    (folder / "image.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (folder / "dir.jsonl").mkdir()  # read_bytes fails, as on an unreadable file (the tests run as root)
    (codex_home / "sessions" / "2025" / "10" / "13" / "rollout-2025-10-13T00-00-00-broken.jsonl").write_text("[1, 2]\n")
    return [folder / "notes.jsonl", folder / "image.jsonl", folder / "dir.jsonl"]


# -- helpers --------------------------------------------------------------------------------------------------

def run_import(env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(PERSMEM), "sessions", "import", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def archived(home: Path, agent: str) -> dict[str, dict]:
    """Each archived session's metadata, by session id, read from the archive on disk (sealed or not)."""
    return {meta["session_id"]: meta for meta in session_metas(home, agent)}


def archive_text(home: Path, agent: str) -> str:
    return "".join(session_text(home, agent, meta["client"], meta["session_id"])[0]
                   for meta in session_metas(home, agent))


@pytest.fixture
def server(tmp_path):
    home = tmp_path / "home"
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS="shell,git,searxng", **plugin_env())
    running = start_server(home, ("kite", "wren"), env)
    yield running
    running.stop()


# -- a backfill stores every line once ----------------------------------------------------------------------------

def test_backfill_of_1000_sessions_then_again_stores_nothing_new(server, tmp_path):
    projects, codex_home, lines = machine(tmp_path / "me", 1000)
    bad = bad_files(projects, codex_home)
    env = server.env | {"HOME": str(tmp_path / "me")}

    first = run_import(env, "--agent", "kite", "--claude", str(projects), "--codex", str(codex_home))
    assert first.returncode == 0, first.stderr
    assert "Traceback" not in first.stderr + first.stdout
    total = sum(lines.values())
    assert f"Imported 1000 session(s) (1000 with new lines): {total:,} lines archived, 4 file(s) skipped, " \
           f"1 secret(s) redacted." in first.stdout
    for path in bad:  # one line each, naming the file and why
        assert sum(str(path) in line for line in first.stderr.splitlines()) == 1, first.stderr
    metas = archived(server.home, "kite")
    assert {sid: meta["lines"] for sid, meta in metas.items()} == lines
    assert "Indexing the new turns for search" in first.stderr
    # the command followed the indexing to the end (its second progress bar): searchable when it returns; every
    # session has turns (rollouts from before Codex 0.4x too: their items are bare lines)
    not_searchable = [meta["session_id"] for meta in metas.values() if not meta["indexed_turns"] == meta["turns"] > 0]
    assert not not_searchable, f"{len(not_searchable)} sessions not indexed or with no turns"
    assert {meta["project"] for meta in metas.values()} == {"billing", "infra", "heron", "atlas"}
    assert SECRET not in archive_text(server.home, "kite")

    again = run_import(env, "--agent", "kite", "--claude", str(projects), "--codex", str(codex_home))
    assert again.returncode == 0, again.stderr
    assert "Nothing new: all 1000 session(s) were already archived (0 lines archived; 4 file(s) skipped)." \
        in again.stdout
    assert {sid: meta["lines"] for sid, meta in archived(server.home, "kite").items()} == lines
    assert not archived(server.home, "wren")  # the sessions are kite's only


def test_import_sends_only_what_the_hooks_did_not_capture(server, tmp_path):
    path = claude_transcript(tmp_path / "projects", "/home/me/src/heron", "Where are thumbnails kept?",
                             "In the cold-storage bucket.")
    lines = path.read_text().splitlines()
    headers = {"Authorization": f"Bearer {server.tokens['kite']}"}
    captured = httpx2.post(f"{server.base_url}/sessions/capture", headers=headers, timeout=30, json={
        "client": "claude", "session_id": path.stem, "cwd": "/home/me/src/heron", "first_line": 0,
        "lines": lines[:2], "event": "Stop"})
    assert captured.status_code == 200, captured.text
    with path.open("a") as transcript:  # the session went on after the hook ran, and its last line is half written
        transcript.write('{"type": "user", "message": {"role": "user", "content": "and the lifecy')

    done = run_import(server.env, "--agent", "kite", "--claude", str(path))
    assert done.returncode == 0, done.stderr
    assert f"Imported 1 session(s) (1 with new lines): {len(lines) - 2} lines archived" in done.stdout
    assert archived(server.home, "kite")[path.stem]["lines"] == len(lines)


def test_a_transcript_shorter_than_its_archive_is_skipped_in_one_line(server, tmp_path):
    path = codex_rollout(tmp_path / "codex", "/home/me/src/atlas", "Rename the atlas tiles", "Renamed.")
    assert run_import(server.env, "--agent", "kite", "--codex", str(path)).returncode == 0
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:3]))  # replaced by another file

    done = run_import(server.env, "--agent", "kite", "--codex", str(path))
    assert done.returncode == 0 and "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if str(path) in line]
    assert "the archive holds" in line and "it is not the transcript that was captured" in line


def test_the_fixtures_import_as_the_hooks_capture_them(tmp_path):
    """The realistic fixtures (conftest.py), put where the clients write them: every line archived once, each
    planted secret redacted (the same counts as a hook's capture), the session ids the hooks would send."""
    from sessions_testkit import CLAUDE_SESSION, CODEX_SESSION, FIXTURES, PLANTED, REDACTIONS, serve

    me = tmp_path / "me"
    claude = me / ".claude" / "projects" / "-home-dev-src-billing-api" / f"{CLAUDE_SESSION}.jsonl"
    codex = me / ".codex" / "sessions" / "2026" / "11" / "03" / f"rollout-2026-11-03T14-02-10-{CODEX_SESSION}.jsonl"
    for path, name in ((claude, "claude_session.jsonl"), (codex, "codex_rollout.jsonl")):
        path.parent.mkdir(parents=True)
        path.write_bytes((FIXTURES / name).read_bytes())
    server = serve(tmp_path / "home", HOME=str(me), CLAUDE_CONFIG_DIR=str(me / ".claude"),
                   CODEX_HOME=str(me / ".codex"), **plugin_env())
    try:
        done = run_import(server.env, "--agent", "kite")
        assert done.returncode == 0, done.stderr
        assert f"{REDACTIONS['claude_session.jsonl'] + REDACTIONS['codex_rollout.jsonl']} secret(s) redacted" \
            in done.stdout
        metas = archived(server.home, "kite")
        for path, name, session_id in ((claude, "claude_session.jsonl", CLAUDE_SESSION),
                                       (codex, "codex_rollout.jsonl", CODEX_SESSION)):
            assert metas[session_id]["lines"] == len(path.read_text().splitlines())
            assert metas[session_id]["redactions"] == REDACTIONS[name]
        assert {m["project"] for m in metas.values()} == {"billing-api", "infra"}
        text = archive_text(server.home, "kite")
        assert not [secret for secrets in PLANTED.values() for secret in secrets if secret in text]
    finally:
        server.stop()


# -- bad input is one line, never a traceback ---------------------------------------------------------------------

def test_an_unknown_agent_is_refused_before_anything_is_read(server, tmp_path):
    projects, codex_home, _ = machine(tmp_path / "me", 2)
    done = run_import(server.env, "--agent", "nobody", "--claude", str(projects))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "no agent named 'nobody'" in done.stderr
    assert not (server.home / "sessions" / "nobody").exists()


def test_no_transcripts_anywhere_names_the_folders_and_the_options(tmp_path):
    home = tmp_path / "home"
    env = clean_env(home, HOME=str(tmp_path / "empty"), CLAUDE_CONFIG_DIR=str(tmp_path / "no-claude"),
                    CODEX_HOME=str(tmp_path / "no-codex"), PERSMEM_DISABLE_PLUGINS="shell,git,searxng",
                    **plugin_env())
    done = run_import(env)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert str(tmp_path / "no-claude" / "projects") in done.stderr and "--claude PATH" in done.stderr


# -- without a server, the import holds the home itself -------------------------------------------------------------

def test_without_a_server_the_import_holds_the_home_and_indexes_for_search(tmp_path):
    home = tmp_path / "home"
    me = tmp_path / "me"
    env = clean_env(home, HOME=str(me), CLAUDE_CONFIG_DIR=str(me / ".claude"), CODEX_HOME=str(me / ".codex"),
                    PERSMEM_DISABLE_PLUGINS="shell,git,searxng", **plugin_env())
    claude_transcript(me / ".claude" / "projects", "/home/me/src/heron", "Where do heron thumbnails go?",
                      "Thumbnails go to the cold-storage bucket heron-thumbs with a 30 day lifecycle rule.")
    codex_rollout(me / ".codex", "/home/me/src/atlas", "Why are atlas tiles blurry?",
                  "The tiles are rendered at half resolution by the zoom-12 preset.")
    first = start_server(home, ("kite",), env)  # creates the agent; no server runs during the import
    first.stop()
    tokens = first.tokens

    done = run_import(env, "--agent", "kite")  # the default folders: $CLAUDE_CONFIG_DIR and $CODEX_HOME
    assert done.returncode == 0, done.stderr
    assert "Imported 2 session(s) (2 with new lines)" in done.stdout
    assert all(meta["indexed_lines"] == meta["lines"] for meta in archived(home, "kite").values())

    server = RunningServer(home, env, free_port(), tokens).start()  # the import let the home go
    try:
        hits = server.call_tool("session_search", {"query": "where do the heron thumbnails go"}, agent="kite")
        assert "heron-thumbs" in json.dumps(hits)
    finally:
        server.stop()


# -- whose sessions: the agent the hooks speak for, and never one session twice -------------------------------------

def test_without_agent_the_import_files_sessions_as_the_hooks_agent_and_never_twice(server, tmp_path):
    me = tmp_path / "me"
    env = server.env | {"HOME": str(me), "CLAUDE_CONFIG_DIR": str(me / ".claude"), "CODEX_HOME": str(me / ".codex")}
    (me / ".claude").mkdir(parents=True)
    installed = subprocess.run([str(PERSMEM), "hooks", "install", "--target", "claude", "--agent", "kite"], env=env,
                               capture_output=True, text=True, timeout=120)
    assert installed.returncode == 0, installed.stderr
    captured_path = claude_transcript(me / ".claude" / "projects", "/home/me/src/heron", "Where are thumbnails kept?",
                                      "In the cold-storage bucket.")
    lines = captured_path.read_text().splitlines()
    headers = {"Authorization": f"Bearer {server.tokens['kite']}"}  # what kite's hooks captured of it
    captured = httpx2.post(f"{server.base_url}/sessions/capture", headers=headers, timeout=30, json={
        "client": "claude", "session_id": captured_path.stem, "cwd": "/home/me/src/heron", "first_line": 0,
        "lines": lines, "event": "Stop"})
    assert captured.status_code == 200, captured.text
    claude_transcript(me / ".claude" / "projects", "/home/me/src/heron", "Resize the heron tiles", "Resized.")

    done = run_import(env)  # no --agent: Claude Code's hooks say kite
    assert done.returncode == 0, done.stderr
    assert "Claude Code sessions are imported as kite (the agent its hooks speak for)." in done.stderr
    assert "Imported 2 session(s) (1 with new lines)" in done.stdout
    assert len(archived(server.home, "kite")) == 2 and not (server.home / "sessions" / "local").exists()
    assert archived(server.home, "kite")[captured_path.stem]["lines"] == len(lines)

    # the same session imported as someone else is the same session: skipped and said so, not archived again
    again = run_import(env, "--agent", "wren", "--claude", str(captured_path))
    assert again.returncode == 0, again.stderr
    [line] = [line for line in again.stderr.splitlines() if str(captured_path) in line]
    assert f"session {captured_path.stem} is already archived for agent kite" in line and "not archived again" in line
    assert "1 session(s) already archived for another agent left alone" in again.stdout
    assert not archived(server.home, "wren")


def test_without_agent_or_hooks_the_import_asks_whose_sessions_they_are(server, tmp_path):
    me = tmp_path / "me"
    env = server.env | {"HOME": str(me), "CLAUDE_CONFIG_DIR": str(me / ".claude"), "CODEX_HOME": str(me / ".codex")}
    claude_transcript(me / ".claude" / "projects", "/home/me/src/heron", "Where are thumbnails kept?", "In a bucket.")
    done = run_import(env)  # kite and wren exist, default_agent 'local' is neither: nobody to guess
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "whose sessions are these?" in done.stderr and "--agent NAME" in done.stderr
    assert "(kite, wren)" in done.stderr
    assert not (server.home / "sessions" / "local").exists()

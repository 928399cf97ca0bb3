"""The persmem home is its user's alone, whether encryption is on or not (issue 32): the home 0700, every file in
it 0600 (0700 if executable), every folder 0700. A real `persmem serve` with encryption off, in a home that
started 0755 with files others could read, takes memories (stored, bulk stored, updated; the index and the
checkpoint saved), mail (sent, read), session turns (captured: archives and the sessions collection), a dashboard
login; then `persmem backup` and `persmem memory export` write their copies. Before, `checkpoint.bin` and
`vectors.hnsw` were 0644 in a 0755 home. The commands a tool runs in the workspace keep the user's own umask:
those files are the user's."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

import httpx2
import pytest

from persmem_core.paths import socket_path
from persmem_core.testing import start_server, write_config
from persmem_core.transport.server_process import persmem_command

OPEN_TO_OTHERS = 0o077


def open_to_others(root: Path, skip: tuple[Path, ...] = ()) -> list[str]:
    """Every file or folder under `root` (and `root` itself) that its group or others may read, write or enter."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if Path(folder, d) not in skip]
        for name in [folder, *(os.path.join(folder, n) for n in files + dirs)]:
            info = os.lstat(name)
            if not stat.S_ISLNK(info.st_mode) and stat.S_IMODE(info.st_mode) & OPEN_TO_OTHERS:
                found.append(f"{oct(stat.S_IMODE(info.st_mode))} {os.path.relpath(name, root)}")
    return sorted(set(found))


def capture_turns(server, agent: str, session_id: str, said: list[str]) -> None:
    """Turns as the session hook sends them to the owner's socket (archived, then indexed in `sessions`)."""
    lines = [json.dumps({"type": "user", "timestamp": "2026-03-01T10:00:00Z",
                         "message": {"role": "user", "content": text}}) for text in said]
    with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(socket_path(server.home))), base_url="http://persmem",
                       headers={"X-Persmem-Agent": agent}, timeout=60) as http:
        start = http.get(f"/sessions/capture/claude/{session_id}").json()["lines"]
        reply = http.post("/sessions/capture", json={"client": "claude", "session_id": session_id,
                                                     "cwd": "/home/dev/src/acme", "first_line": start,
                                                     "lines": lines, "event": "Stop"})
        assert reply.status_code == 200, reply.text


def wait_for(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        time.sleep(0.3)


def persmem(env, *args: str):
    return subprocess.run(persmem_command(*args), env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def home_after_a_session(tmp_path_factory):
    """A home that began open to others (0755, a stray 0644 file and a 0755 folder in it), after a session of
    writes with encryption off and a stop (which saves the index and the checkpoint)."""
    root = tmp_path_factory.mktemp("modes")
    home = root / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    write_config(home, {"encryption": {"enabled": False}, "memory": {"save_index_every": 3},
                        "shell": {"extra_allow": {"touch": {}, "mkdir": {}}}})
    os.chmod(home / "persmem.toml", 0o644)
    (home / "notes-from-before").mkdir(mode=0o755)
    (home / "notes-from-before" / "old.txt").write_text("left by an older version")
    os.chmod(home / "notes-from-before", 0o755)
    os.chmod(home / "notes-from-before" / "old.txt", 0o644)
    server = start_server(home, agents=("kite", "wren"))
    try:
        server.call_tools([
            ("memory_store", {"content": "The deploy key lives in the ops vault.", "project": "acme"}),
            ("memory_store", {"content": "A note in its own collection.", "collection": "notes"}),
            ("memory_bulk_store", {"chunks": [{"content": f"turn {n} of an imported talk"} for n in range(5)]}),
            ("bootstrap_update", {"entry_id": "kite-identity", "content": "I am kite."}),
            ("memory_search", {"query": "deploy key"}),
            ("amq_send", {"to_agent": "wren", "subject": "hello", "body": "the deploy is at 5"}),
        ], agent="kite")
        unread = server.call_tool("amq_check", {}, agent="wren")["messages"]
        server.call_tool("amq_read", {"agent": "", "msg_id": unread[0]["id"]}, agent="wren")
        capture_turns(server, "kite", "s-1", ["where does the deploy key live?", "and who rotates it?"])
        wait_for(lambda: server.call_tool("memory_stats", {"collection": "sessions"}, agent="kite")["count"] == 2,
                 "the captured turns were indexed")
        base = server.url.replace("/mcp", "/dashboard")
        with httpx2.Client(timeout=30) as client:
            form = client.get(base + "/login")
            csrf = form.text.split('name="_csrf_token" value="', 1)[1].split('"', 1)[0]
            client.post(base + "/login", data={"token": server.tokens["kite"], "_csrf_token": csrf})
            assert client.get(base + "/overview").status_code == 200
        log = server.log()
    finally:
        server.stop()
    return home, server, log, root


def test_every_file_and_folder_of_the_home_is_the_users_alone_with_encryption_off(home_after_a_session):
    home, _, _, _ = home_after_a_session
    collection = home / "memory" / "memories"
    for name in ("records.log", "vectors.hnsw", "checkpoint.bin", "model.json"):
        assert (collection / name).is_file(), name  # the files the issue found 0644, written with encryption off
    assert not (collection / "records.log").read_bytes().startswith(b"\xc1PMS")  # plaintext indeed
    assert any((home / "sessions").rglob("*.jsonl.gz")) and any((home / "amq").rglob("cur/*"))
    assert open_to_others(home) == []


def test_a_home_left_open_is_tightened_at_start_with_a_log_line(home_after_a_session):
    home, _, log, _ = home_after_a_session
    assert f"persmem home {home} was mode 0755, open to others: now 0700" in log
    assert "were open to others: now 0600 / 0700" in log
    assert (home / "notes-from-before" / "old.txt").read_text() == "left by an older version"  # modes only


def test_backups_and_exports_are_the_users_alone(home_after_a_session):
    home, server, _, root = home_after_a_session
    env = dict(server.env)
    done = persmem(env, "backup", str(root / "backups"), "--keep", "2")
    assert done.returncode == 0, done.stderr
    done = persmem(env, "memory", "export", str(root / "export.jsonl"))
    assert done.returncode == 0, done.stderr
    assert open_to_others(root / "backups") == []
    assert stat.S_IMODE(os.stat(root / "export.jsonl").st_mode) == 0o600


def test_the_commands_tools_run_in_the_workspace_keep_the_users_umask(tmp_path):
    """The workspace's files are the user's: what a shell command makes there gets the modes the server was
    started with (umask 022 here), not persmem's 077."""
    home = tmp_path / "home"
    write_config(home, {"shell": {"extra_allow": {"touch": {}, "mkdir": {}}}})
    old = os.umask(0o022)
    try:
        server = start_server(home, agents=("kite",))
    finally:
        os.umask(old)
    try:
        server.call_tool("shell_exec", {"command": "touch made-by-a-command"}, agent="kite")
        server.call_tool("shell_exec", {"command": "mkdir folder-by-a-command"}, agent="kite")
        workspace = home / "workspace"
        assert stat.S_IMODE(os.stat(workspace / "made-by-a-command").st_mode) == 0o644
        assert stat.S_IMODE(os.stat(workspace / "folder-by-a-command").st_mode) == 0o755
        assert open_to_others(home, skip=(workspace,)) == []  # the rest of the home stays private
    finally:
        server.stop()


def test_tightening_follows_no_link_and_leaves_the_workspace_and_a_private_home_alone(tmp_path):
    from persmem_core.paths import secure_home

    outside = tmp_path / "outside.txt"
    outside.write_text("someone else's")
    os.chmod(outside, 0o644)
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    (home / "workspace").mkdir()
    (home / "workspace" / "readme.md").write_text("the user's own file")
    os.chmod(home / "workspace" / "readme.md", 0o644)
    (home / "link").symlink_to(outside)
    (home / "data.json").write_text("{}")
    os.chmod(home / "data.json", 0o644)
    done = secure_home(home, skip=[home / "workspace"])
    assert (done.home_mode, done.files) == (0o755, 1)
    assert stat.S_IMODE(os.stat(outside).st_mode) == 0o644  # the link's target is not the home's
    assert stat.S_IMODE(os.stat(home / "workspace" / "readme.md").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(home / "data.json").st_mode) == 0o600
    os.chmod(home / "data.json", 0o644)  # a home that is 0700 already is not walked: one stat per start
    assert secure_home(home, skip=[]).files == 0 and stat.S_IMODE(os.stat(home).st_mode) == 0o700

"""kill -9 against encryption at rest (issue 19): during `persmem key rotate`, during `persmem key migrate`, and
during a burst of sealed writes to a running server. Real processes, real MCP clients, SIGKILL.

What each test refuses: an acknowledged memory (with its versions), mail message or session that can not be read
back with its content after the kill; a rotation or migration that a second run can not finish; a finished run
that leaves a `.next` key, the old key id, or any file still to rewrite (`persmem key status` counts them).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import anyio
import httpx2
import pytest

from persmem_core.paths import socket_path
from persmem_core.testing import clean_env, start_server, write_config
from persmem_core.transport.server_process import persmem_command
from persmem_core.transport.tool_answers import tool_result

MEMORIES = 300
MAILS = 40
SESSIONS = 6
TURNS = 8  # lines per session transcript


def persmem(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(persmem_command(*args), env=env, capture_output=True, text=True, timeout=timeout)


def calls(server, agent: str, batch: list[tuple[str, dict]]) -> list:
    return server.call_tools(batch, agent=agent)


def transcript(session: int) -> list[str]:
    lines = []
    for turn in range(TURNS):
        role = "user" if turn % 2 == 0 else "assistant"
        text = f"session {session} turn {turn}: the {['heron', 'lynx', 'otter', 'wren'][turn % 4]} task {session * 31}"
        message = {"role": role, "content": text if role == "user" else [{"type": "text", "text": text}]}
        lines.append(json.dumps({"type": role, "timestamp": f"2026-11-04T10:{session:02d}:{turn:02d}Z",
                                 "sessionId": f"s{session}", "message": message}))
    return lines


def populate(home: Path, config: dict) -> dict:
    """A home with MEMORIES memories (some updated), SESSIONS captured sessions and MAILS messages, written by a
    real server under `config`; returns what the tools acknowledged (what must read back after any kill)."""
    write_config(home, config)
    server = start_server(home, agents=("kite", "wren"))
    expected = {"memories": {}, "versions": {}, "mail": {}, "sessions": {}}
    try:
        chunks = [{"content": f"note {i}: the build of module {i % 17} needs flag {i * 13}", "project": f"p{i % 5}"}
                  for i in range(MEMORIES - 10)]
        [bulk] = calls(server, "kite", [("memory_bulk_store", {"chunks": chunks, "context_chars": 0,
                                                               "dedup": False})])
        for chunk, result in zip(chunks, bulk["results"], strict=True):
            expected["memories"][result["id"]] = chunk["content"]
        batch = [("memory_store", {"content": f"decision {i}: we ship on day {i}", "memory_id": f"dec-{i}",
                                   "dedup": False}) for i in range(10)]
        batch += [("memory_update", {"memory_id": f"dec-{i}", "content": f"decision {i}: we ship on day {i + 1}"})
                  for i in range(5)]
        calls(server, "kite", batch)
        for i in range(10):
            expected["memories"][f"dec-{i}"] = f"decision {i}: we ship on day {i + 1 if i < 5 else i}"
            if i < 5:
                expected["versions"][f"dec-{i}"] = [f"decision {i}: we ship on day {i}"]  # the one before
        sent = calls(server, "kite", [("amq_send", {"to_agent": "wren", "subject": f"m{i}",
                                                    "body": f"mail {i}: rebuild the index on node {i * 3}"})
                                      for i in range(MAILS)])
        for i, reply in enumerate(sent):
            expected["mail"][reply["id"]] = f"mail {i}: rebuild the index on node {i * 3}"
        with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(socket_path(home))), base_url="http://persmem",
                           headers={"X-Persmem-Agent": "kite"}, timeout=30) as http:
            for session in range(SESSIONS):
                answer = http.post("/sessions/capture", json={
                    "client": "claude", "session_id": f"s{session}", "cwd": "/home/dev/src/nightly",
                    "first_line": 0, "lines": transcript(session), "event": "Stop"})
                assert answer.status_code == 200, answer.text
                expected["sessions"][f"s{session}"] = [json.loads(line)["message"] for line in transcript(session)]
    finally:
        server.stop()
    (home / "server.log").unlink(missing_ok=True)
    expected["tokens"] = server.tokens
    return expected


def check_readable(home: Path, expected: dict, env: dict[str, str] | None = None, what: str = "") -> None:
    """Start the server and read back everything acknowledged; stop it."""
    server = start_server(home, env=env or clean_env(home))
    server.tokens = expected["tokens"]
    try:
        ids = sorted(expected["memories"])
        got = calls(server, "kite", [("memory_get", {"memory_id": memory_id,
                                                     "include_history": memory_id in expected["versions"]})
                                     for memory_id in ids])
        for memory_id, memory in zip(ids, got, strict=True):
            assert memory["content"] == expected["memories"][memory_id], f"{what}: memory {memory_id}"
            if memory_id in expected["versions"]:
                assert memory["version"] == 2, f"{what}: version of {memory_id}"
                assert [v["content"] for v in memory["history"]] == expected["versions"][memory_id], \
                    f"{what}: versions of {memory_id}"
        mail_ids = sorted(expected["mail"])
        mail = calls(server, "wren", [("amq_read", {"agent": "wren", "msg_id": msg_id}) for msg_id in mail_ids])
        for msg_id, message in zip(mail_ids, mail, strict=True):
            assert expected["mail"][msg_id] in json.dumps(message), f"{what}: mail {msg_id}"
        sessions = sorted(expected["sessions"])
        read = calls(server, "kite", [("session_read", {"session_id": s, "limit": 50}) for s in sessions])
        for session, reply in zip(sessions, read, strict=True):
            texts = [turn["text"] for turn in reply["turns"]]
            assert len(texts) == TURNS, f"{what}: session {session} has {len(texts)} turns"
            for line, text in zip(expected["sessions"][session], texts, strict=True):
                said = line["content"] if isinstance(line["content"], str) else line["content"][0]["text"]
                assert said in text, f"{what}: session {session}"
    finally:
        server.stop()
        (home / "server.log").unlink(missing_ok=True)


def kill_when(args: list[str], env: dict[str, str], appears: Path, delay: float) -> str:
    """Run `persmem *args`; `delay` seconds after `appears` exists, SIGKILL it. Returns what happened: "killed",
    or "finished" when it was done first."""
    process = subprocess.Popen(persmem_command(*args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not appears.exists() and process.poll() is None:
        assert time.monotonic() < deadline, "the command never got going"
        time.sleep(0.001)
    if delay:
        time.sleep(delay)
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
        process.wait()
        return "killed"
    out, err = process.communicate()
    assert process.returncode == 0, err.decode()
    return "finished"


def files_to_rewrite(env: dict[str, str]) -> str:
    """`persmem key status`'s lines about files not as new writes make them (empty when none)."""
    status = persmem(env, "key", "status")
    assert status.returncode == 0, status.stderr
    assert "files:" in status.stdout, status.stdout
    return "\n".join(line for line in status.stdout.splitlines() if "not as new writes are" in line)


@pytest.fixture(scope="module")
def sealed_home(tmp_path_factory):
    """A populated home, encryption on (the default), mail sealed; and what it acknowledged."""
    home = tmp_path_factory.mktemp("sealed") / "home"
    return home, populate(home, {"amq": {"encrypt": True}})


@pytest.fixture(scope="module")
def plain_home(tmp_path_factory):
    """A populated home written with `[encryption] enabled = false` (mail asked to be sealed, but no key)."""
    home = tmp_path_factory.mktemp("plain") / "home"
    return home, populate(home, {"encryption": {"enabled": False}, "amq": {"encrypt": True}})


# -- rotation ----------------------------------------------------------------------------------------------------

# seconds after the new key (`persmem.key.next`) appears; rotating this home takes ~0.1-0.2 s after that
ROTATE_KILLS = (0.0, 0.01, 0.03, 0.06, 0.1, 0.16)


def test_kill_9_during_key_rotate_leaves_everything_readable_and_a_rerun_finishes(sealed_home, tmp_path):
    base, expected = sealed_home
    old_id = json.loads((base / "encryption.json").read_text())["key_ids"][0]
    outcomes = []
    for n, delay in enumerate(ROTATE_KILLS):
        home = tmp_path / f"h{n}"
        shutil.copytree(base, home, symlinks=True)
        env = clean_env(home)
        outcome = kill_when(["key", "rotate"], env, home / "persmem.key.next", delay)
        outcomes.append(outcome)
        check_readable(home, expected, env, what=f"rotate killed {delay}s after persmem.key.next appeared")
        if n in (1, len(ROTATE_KILLS) - 1) or outcome == "finished":  # a rerun finishes it (some of them: time)
            done = persmem(env, "key", "rotate")
            assert done.returncode == 0, done.stderr
            assert not (home / "persmem.key.next").exists()
            new_ids = json.loads((home / "encryption.json").read_text())["key_ids"]
            assert len(new_ids) == 1 and new_ids[0] != old_id
            assert files_to_rewrite(env) == ""
            check_readable(home, expected, env, what=f"rotation finished after a kill at {delay}s")
    print(f"rotate kill points {ROTATE_KILLS}: {outcomes}")
    assert "killed" in outcomes, outcomes


# -- migration ---------------------------------------------------------------------------------------------------

# seconds after the key file is made (the migration's first write); migrating this home takes ~0.05-0.2 s after that
MIGRATE_KILLS = (0.0, 0.01, 0.03, 0.06, 0.1)


def test_kill_9_during_key_migrate_leaves_everything_readable_and_a_rerun_finishes(plain_home, tmp_path):
    base, expected = plain_home
    assert not (base / "persmem.key").exists()
    outcomes = []
    for n, delay in enumerate(MIGRATE_KILLS):
        home = tmp_path / f"h{n}"
        shutil.copytree(base, home, symlinks=True)
        write_config(home, {"amq": {"encrypt": True}})  # encryption switched on (the default)
        env = clean_env(home)
        outcome = kill_when(["key", "migrate"], env, home / "persmem.key", delay)
        outcomes.append(outcome)
        check_readable(home, expected, env, what=f"migrate killed {delay}s after the key was made")
        done = persmem(env, "key", "migrate")
        assert done.returncode == 0, done.stderr
        assert files_to_rewrite(env) == ""
        if n == len(MIGRATE_KILLS) - 1:
            check_readable(home, expected, env, what=f"migration finished after a kill at {delay}s")
    print(f"migrate kill points {MIGRATE_KILLS}: {outcomes}")
    assert "killed" in outcomes, outcomes


def test_key_status_counts_the_plaintext_files_of_a_home_switched_to_encryption(plain_home, tmp_path):
    """Before the first start with encryption on (no key made yet) as after it, `persmem key status` says the
    plaintext files need `persmem key migrate`: an operator who switched encryption on must not read "all done"."""
    base, _ = plain_home
    home = tmp_path / "home"
    shutil.copytree(base, home, symlinks=True)
    write_config(home, {"amq": {"encrypt": True}})
    env = clean_env(home)
    before_key = files_to_rewrite(env)
    server = start_server(home, env=env)  # makes the key
    server.stop()
    after_key = files_to_rewrite(env)
    assert "memory" in after_key and "mail" in after_key and "sessions" in after_key, after_key
    assert before_key == after_key, (before_key, after_key)


# -- a running server --------------------------------------------------------------------------------------------

def test_kill_9_of_the_server_during_sealed_stores_and_sends_loses_no_acknowledged_write(tmp_path):
    home = tmp_path / "home"
    write_config(home, {"amq": {"encrypt": True}})
    server = start_server(home, agents=("kite", "wren"))
    memories: dict[str, str] = {}
    mail: dict[str, str] = {}
    lock = threading.Lock()
    try:
        warm = calls(server, "kite", [("memory_store", {"content": "warm-up: the embedder is loaded", "dedup": False}),
                                      ("amq_send", {"to_agent": "wren", "body": "warm-up"})])
        memories[warm[0]["id"]], mail[warm[1]["id"]] = "warm-up: the embedder is loaded", "warm-up"
        for round_, run_for in enumerate((1.5, 2.5)):
            stop = threading.Event()

            def writer(worker: int, kind: str, stop=stop, round_=round_):
                async def run():
                    async with server.client("kite") as client:
                        i = 0
                        while not stop.is_set():
                            text = f"round {round_} worker {worker} item {i}: {kind} about the lynx deploy {i * 7}"
                            if kind == "memory":
                                result = await client.call_tool("memory_store", {"content": text, "dedup": False})
                                with lock:
                                    memories[tool_result(result)["id"]] = text
                            else:
                                result = await client.call_tool("amq_send", {"to_agent": "wren",
                                                                             "subject": f"w{worker}", "body": text})
                                with lock:
                                    mail[tool_result(result)["id"]] = text
                            i += 1
                try:
                    anyio.run(run)
                except Exception:  # the kill cuts the calls in flight (a timeout is not caught)
                    pass

            threads = [threading.Thread(target=writer, args=(w, kind)) for w, kind in
                       enumerate(("memory", "memory", "mail", "mail"))]
            with lock:
                before = (len(memories), len(mail))
            for thread in threads:
                thread.start()
            time.sleep(run_for)
            server.kill()
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
            with lock:
                assert len(memories) > before[0] and len(mail) > before[1], ("no write was acknowledged", before,
                                                                             len(memories), len(mail))
            tokens = server.tokens
            server = start_server(home, env=server.env)
            server.tokens = tokens
            ids = sorted(memories)
            got = calls(server, "kite", [("memory_get", {"memory_id": memory_id}) for memory_id in ids])
            for memory_id, memory in zip(ids, got, strict=True):
                assert memory["content"] == memories[memory_id], f"acknowledged {memory_id} lost after kill {round_}"
            msg_ids = sorted(mail)
            read = calls(server, "wren", [("amq_read", {"agent": "wren", "msg_id": m}) for m in msg_ids])
            for msg_id, message in zip(msg_ids, read, strict=True):
                assert mail[msg_id] in json.dumps(message), f"acknowledged mail {msg_id} lost after kill {round_}"
    finally:
        server.stop()
    inbox = home / "amq" / "wren" / "inbox"
    delivered = [p for folder in ("new", "cur") for p in (inbox / folder).iterdir() if p.is_file()]
    assert delivered and all(p.read_bytes().startswith(b"\xc1PMS") for p in delivered)
    # a kill between creating and writing a delivery leaves a partial tmp/ file: a prefix of a sealed one
    for partial in (inbox / "tmp").iterdir():
        head = partial.read_bytes()[:4]
        assert b"\xc1PMS".startswith(head), (partial, head)
    assert not any(b"lynx deploy" in p.read_bytes() for p in home.rglob("*") if p.is_file() and p.name != "server.log")

"""Encryption at rest, end to end (issue 19): a real `persmem serve`, real MCP clients, the real session hook and
the real `persmem backup` command.

Grouped by what each test refuses:
- text on disk in the clear: distinctive words planted through every tool that stores text (memories and their
  versions, tags, project, notes, bootstrap entries, bulk stores, search queries, session transcripts and their
  titles through the hook, a recall prompt, mail subjects, bodies and replies) are read back by the tools, and
  no file under the home, nor any file of a backup of it, holds any of them: not as written, not lowercased, not
  in a gzip member, not in a file name; the same after a restart (the sealed index snapshot loads);
- mail sealed when nobody asked: with `[amq] encrypt` left at its default mail stays in plain Maildir, as the
  configuration documents;
- a wrong, missing or exposed key that starts anyway or writes anything: the server stops with a message naming
  the key id and the fix, and not one file under the home changes or appears.

Each planted word is a made-up mixed-case word without separators, so a tokenizer (BM25) keeps it whole; the
search looks for it as written, lowercased, and by its first ten letters lowercased (what a stemmer leaves).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from persmem_core.net.addresses import free_port
from persmem_core.testing import clean_env, start_server, write_config
from persmem_core.transport.server_process import persmem_command

# channel -> planted word; a leak names the channel it came through
PLANTED = {
    "memory_store content": "Quorzelbimtax",
    "memory_store tags": "Vrindlepoxum",
    "memory_store project": "Glaxtorbundy",
    "memory_store memory_id": "Snorbifluxet",
    "memory_update v2 content": "Trumplevoxia",
    "memory_update v3 content": "Wembliquatrox",
    "memory_update tags": "Yastrovimbel",
    "memory_validate note": "Plonkristavo",
    "bootstrap_update content": "Zibbertrunqol",
    "memory_bulk_store content": "Krempflodaxis",
    "memory_search query": "Fwinzeltroqua",
    "session first user turn (title)": "Drozzlewampit",
    "session assistant turn": "Mubblexirtona",
    "session later user turn": "Hontrivaspel",
    "session tool result": "Ixtrambolique",
    "hook UserPromptSubmit prompt": "Brastoquillen",
    "amq_send subject": "Ulmvortrexin",
    "amq_send body": "Cazzimbrovelt",
    "amq_reply subject": "Nuxtrobelvian",
    "amq_reply body": "Oppelwraxtun",
}
HOOK = [sys.executable, "-m", "persmem_sessions.hook", "--client", "claude"]
SESSION = "5d1e0c2a-7b4f-4e8a-9c31-19ab2f6e0d77"


# -- finding words on disk ---------------------------------------------------------------------------------------

def needles(word: str) -> set[bytes]:
    return {word.encode(), word.lower().encode(), word.lower()[:10].encode()}


def readable_views(data: bytes):
    """The bytes as stored, and the inflated content of every gzip member or zlib stream in them (compressed text
    is still text in the clear: a byte search alone would miss it)."""
    yield data
    for magic, wbits in ((b"\x1f\x8b\x08", 31), (b"\x78\x9c", 15), (b"\x78\xda", 15), (b"\x78\x01", 15)):
        at = data.find(magic)
        while at >= 0:
            try:
                yield zlib.decompressobj(wbits=wbits).decompress(data[at:], 50_000_000)
            except zlib.error:
                pass
            at = data.find(magic, at + 1)


def leaks(root: Path, planted: dict[str, str] = PLANTED) -> list[str]:
    """`file: channel (word)` for every planted word found in a file's bytes (or its name) under `root`."""
    found = []
    files = sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink())
    assert files, f"nothing under {root}"
    for path in sorted(root.rglob("*")):
        for channel, word in planted.items():
            if any(n.decode() in str(path.relative_to(root)).lower() for n in needles(word)):
                found.append(f"{path} (its name): {channel} ({word})")
    for path in files:
        data = path.read_bytes()
        for view in readable_views(data):
            for channel, word in planted.items():
                if any(n in view for n in needles(word)):
                    found.append(f"{path}: {channel} ({word})")
    return sorted(set(found))


def snapshot(root: Path) -> dict[str, str]:
    """Every path under `root` -> the sha256 of its bytes (folders: "dir", links: their target, sockets and the
    like: "other"), the owner lock and socket included: a refused start takes neither."""
    shot = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            shot[rel] = "link:" + os.readlink(path)
        elif path.is_dir():
            shot[rel] = "dir"
        elif path.is_file():
            shot[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            shot[rel] = "other"
    return shot


# -- driving the server ------------------------------------------------------------------------------------------

def persmem(env: dict[str, str], *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(persmem_command(*args), env=env, capture_output=True, text=True, timeout=timeout)


def calls(server, agent: str, batch: list[tuple[str, dict]]) -> list:
    return server.call_tools(batch, agent=agent)


def transcript_line(kind: str, text: str, second: int) -> str:
    stamp = f"2026-11-04T10:00:{second:02d}Z"
    if kind == "user":
        return json.dumps({"type": "user", "timestamp": stamp, "sessionId": SESSION,
                           "message": {"role": "user", "content": text}})
    if kind == "tool_result":
        return json.dumps({"type": "user", "timestamp": stamp, "sessionId": SESSION,
                           "message": {"role": "user", "content": [
                               {"type": "tool_result", "tool_use_id": "toolu_01", "content": text}]}})
    if kind == "tool_use":
        return json.dumps({"type": "assistant", "timestamp": stamp, "sessionId": SESSION,
                           "message": {"role": "assistant", "content": [
                               {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": text}}]}})
    return json.dumps({"type": "assistant", "timestamp": stamp, "sessionId": SESSION,
                       "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})


def run_hook(home: Path, event: dict, agent: str = "kite") -> subprocess.CompletedProcess:
    """The sessions hook as Claude Code runs it: the event on stdin, the home in its arguments."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERSMEM_")} | {"PERSMEM_HOOK_DEBUG": "1"}
    done = subprocess.run([*HOOK, "--agent", agent, "--home", str(home)], input=json.dumps(event), env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done


def wait_for(condition, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def plant_everything(server, tmp_path: Path) -> dict:
    """Store every planted word through its tool (and the hook); returns the ids to read them back by."""
    w = PLANTED
    stored, bulk, boot = calls(server, "kite", [
        ("memory_store", {"content": f"The release train leaves when {w['memory_store content']} is green.",
                          "tags": f"deploy,{w['memory_store tags'].lower()}",
                          "project": w["memory_store project"].lower(),
                          "memory_id": f"{w['memory_store memory_id'].lower()}-notes"}),
        ("memory_bulk_store", {"chunks": [{"content": f"Bulk note: the {w['memory_bulk_store content']} cache "
                                                      "warms at six."},
                                          {"content": "Bulk note: the other cache warms at seven."}],
                               "context_chars": 0}),
        ("bootstrap_update", {"entry_id": "kite-identity",
                              "content": f"I am kite; I review {w['bootstrap_update content']} pull requests."}),
    ])
    memory_id = stored["id"]
    calls(server, "kite", [
        ("memory_update", {"memory_id": memory_id,
                           "content": f"The release train leaves when {w['memory_update v2 content']} is green."}),
        ("memory_update", {"memory_id": memory_id,
                           "content": f"The release train leaves when {w['memory_update v3 content']} is green.",
                           "tags": f"deploy,{w['memory_update tags'].lower()}"}),
        ("memory_search", {"query": f"when does {w['memory_search query']} leave"}),
    ])
    calls(server, "wren", [("memory_validate", {"memory_id": memory_id, "helpful": True,
                                                "note": f"{w['memory_validate note']} confirmed it"})])
    # a Claude Code session, captured by the real hook in two Stop events, and a prompt seen by recall
    transcript = tmp_path / "transcript.jsonl"
    first = [transcript_line("user", f"Why does the {w['session first user turn (title)']} job stall at night?", 0),
             transcript_line("assistant", f"It waits on {w['session assistant turn']} to finish.", 1),
             transcript_line("tool_use", "cat /var/log/nightly.log", 2),
             transcript_line("tool_result", f"nightly: waiting for {w['session tool result']} lock", 3)]
    later = [transcript_line("user", f"And the {w['session later user turn']} cache?", 4),
             transcript_line("assistant", "Cold after each deploy.", 5)]
    event = {"session_id": SESSION, "transcript_path": str(transcript), "cwd": str(tmp_path / "nightly"),
             "hook_event_name": "Stop", "permission_mode": "default"}
    transcript.write_text("\n".join(first) + "\n")
    run_hook(server.home, event)
    transcript.write_text("\n".join(first + later) + "\n")
    run_hook(server.home, event)
    run_hook(server.home, event | {"hook_event_name": "UserPromptSubmit",
                                   "prompt": f"what did we decide about {w['hook UserPromptSubmit prompt']}?"})
    sent, = calls(server, "kite", [("amq_send", {"to_agent": "wren",
                                                 "subject": f"About {w['amq_send subject']}",
                                                 "body": f"Please look at {w['amq_send body']} today."})])
    reply, = calls(server, "wren", [("amq_reply", {"msg_id": sent["id"], "subject": f"Re {w['amq_reply subject']}",
                                                   "body": f"Done, {w['amq_reply body']} is fixed."})])
    return {"memory": memory_id, "bulk": bulk["results"][0]["id"], "boot": boot["id"], "sent": sent["id"],
            "reply": reply["id"]}


def read_everything_back(server, ids: dict) -> None:
    """The tools give back every planted word that is content (queries and prompts are not kept)."""
    w = PLANTED
    got, boot, bulk, found = calls(server, "kite", [
        ("memory_get", {"memory_id": ids["memory"], "include_history": True}),
        ("memory_get", {"memory_id": ids["boot"]}),
        ("memory_get", {"memory_id": ids["bulk"]}),
        ("memory_search", {"query": f"release train {w['memory_update v3 content']}",
                           "project": w["memory_store project"].lower()}),
    ])
    history = json.dumps(got)
    for channel in ("memory_store content", "memory_update v2 content", "memory_update v3 content",
                    "memory_update tags", "memory_validate note", "memory_store project"):
        assert w[channel].lower() in history.lower(), channel
    assert got["version"] == 3 and w["memory_update v3 content"] in got["content"]
    assert w["bootstrap_update content"] in boot["content"] and w["memory_bulk_store content"] in bulk["content"]
    assert ids["memory"] in json.dumps(found)
    listed, read, searched = calls(server, "kite", [
        ("session_list", {}),
        ("session_read", {"session_id": SESSION, "limit": 50}),
        ("session_search", {"query": w["session assistant turn"]}),
    ])
    assert [row["title"] for row in listed["sessions"]] == [
        f"Why does the {w['session first user turn (title)']} job stall at night?"]
    turns = json.dumps(read["turns"])
    for channel in ("session first user turn (title)", "session assistant turn", "session later user turn",
                    "session tool result"):
        assert w[channel] in turns, channel
    assert SESSION in json.dumps(searched)
    wren_mail, kite_mail = calls(server, "wren", [("amq_read", {"agent": "wren", "msg_id": ids["sent"]})]), \
        calls(server, "kite", [("amq_read", {"agent": "kite", "msg_id": ids["reply"]})])
    for channel in ("amq_send subject", "amq_send body"):
        assert w[channel] in json.dumps(wren_mail), channel
    for channel in ("amq_reply subject", "amq_reply body"):
        assert w[channel] in json.dumps(kite_mail), channel


def wait_until_sessions_indexed(server) -> None:
    """The memory side indexes session turns in the background: wait until session_search finds the later turn."""
    def indexed():
        [reply] = calls(server, "kite", [("session_search", {"query": PLANTED["session later user turn"]})])
        return not reply.get("indexing") and any(PLANTED["session later user turn"] in r["text"]
                                                 for r in reply["results"])
    wait_for(indexed, what="the session's turns in session_search")


# -- nothing in the clear ----------------------------------------------------------------------------------------

def test_every_planted_word_reads_back_and_is_on_no_file_of_the_home_or_its_backup(tmp_path):
    home = tmp_path / "home"
    write_config(home, {"amq": {"encrypt": True}})  # [encryption] left at its default: on
    server = start_server(home, agents=("kite", "wren"))
    try:
        ids = plant_everything(server, tmp_path)
        wait_until_sessions_indexed(server)
        read_everything_back(server, ids)
        live = persmem(server.env, "backup", str(tmp_path / "backups" / "live"))  # while it serves
        assert live.returncode == 0, live.stderr
        assert leaks(home) == []
    finally:
        server.stop()
    assert leaks(home) == []  # what shutdown wrote (the index snapshot, usage counts) too
    assert leaks(tmp_path / "backups" / "live") == []
    cold = persmem(server.env, "backup", str(tmp_path / "backups" / "cold"))
    assert cold.returncode == 0, cold.stderr
    assert leaks(tmp_path / "backups" / "cold") == []
    key = (home / "persmem.key").read_bytes()
    for path in (tmp_path / "backups").rglob("*"):
        if path.is_file():
            assert key not in path.read_bytes() and key.hex().encode() not in path.read_bytes(), path
    manifest = json.loads((tmp_path / "backups" / "cold" / "MANIFEST.json").read_text())
    assert manifest["encryption"]["key_ids"]

    # restarted: the sealed index snapshot and logs open, everything reads back, still nothing in the clear
    again = start_server(home, env=server.env)
    again.tokens = server.tokens
    try:
        read_everything_back(again, ids)
        assert leaks(home) == []
    finally:
        again.stop()
    assert leaks(home) == []


def test_with_encryption_off_the_same_search_finds_every_stored_word(tmp_path):
    """The control: the same planting with `[encryption] enabled = false` and plain mail, and the search finds
    each stored word on disk (session archives only inflated), so "found nowhere" above means sealed, not missed."""
    home = tmp_path / "home"
    write_config(home, {"encryption": {"enabled": False}})
    server = start_server(home, agents=("kite", "wren"))
    try:
        plant_everything(server, tmp_path)
        wait_until_sessions_indexed(server)
    finally:
        server.stop()
    found = leaks(home)
    not_kept = {"memory_search query", "hook UserPromptSubmit prompt"}  # asked, never stored
    for channel in PLANTED.keys() - not_kept:
        assert any(f": {channel} (" in line for line in found), f"{channel} not found on disk with encryption off"
    assert not [line for line in found if any(f": {channel} (" in line for channel in not_kept)], found


def test_mail_stays_plain_maildir_unless_amq_encrypt_is_set(tmp_path):
    """The documented default: `[amq] encrypt = false`, persMEM's plain Maildir (memories are sealed all the same)."""
    from persmem_amq_maildir.config import AmqConfig

    assert AmqConfig().encrypt is False
    home = tmp_path / "home"
    server = start_server(home, agents=("kite", "wren"))
    try:
        calls(server, "kite", [
            ("amq_send", {"to_agent": "wren", "subject": "plain",
                          "body": f"Please look at {PLANTED['amq_send body']} today."}),
            ("memory_store", {"content": f"The release train leaves when {PLANTED['memory_store content']} is green."}),
        ])
    finally:
        server.stop()
    found = leaks(home)
    assert found and all("/amq/wren/inbox/new/" in line and "amq_send body" in line for line in found), found


# -- a wrong, missing or exposed key ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sealed_home(tmp_path_factory):
    """A home with memories, a session and sealed mail, written under its own key file; served once, stopped."""
    tmp_path = tmp_path_factory.mktemp("sealed")
    home = tmp_path / "home"
    write_config(home, {"amq": {"encrypt": True}})
    server = start_server(home, agents=("kite", "wren"))
    try:
        calls(server, "kite", [
            ("memory_store", {"content": f"The release train leaves when {PLANTED['memory_store content']} is green.",
                              "memory_id": "train"}),
            ("amq_send", {"to_agent": "wren", "subject": "s",
                          "body": f"Please look at {PLANTED['amq_send body']} today."}),
        ])
    finally:
        server.stop()
    (home / "server.log").unlink()  # the test harness's file, not the server's
    key_id = json.loads((home / "encryption.json").read_text())["key_ids"][0]
    return home, key_id, server.tokens


def refused_start(home: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`persmem serve` that must stop by itself (its output kept out of the home, which must not change)."""
    return subprocess.run(
        persmem_command("serve", "--transport", "http", "--host", "127.0.0.1", "--port", str(free_port())),
        env=env, capture_output=True, text=True, timeout=60)


def test_another_key_in_persmem_key_stops_the_server_naming_both_ids_and_changes_nothing(sealed_home):
    home, key_id, _ = sealed_home
    before = snapshot(home)
    other = bytes(range(32)).hex()
    done = refused_start(home, clean_env(home, PERSMEM_KEY=other))
    assert done.returncode != 0
    message = done.stdout + done.stderr
    assert "Traceback" not in message, message[-3000:]
    assert key_id in message and "PERSMEM_KEY" in message, message[-3000:]
    assert "not the key" in message and "Load the right key" in message, message[-3000:]
    assert snapshot(home) == before


def test_a_deleted_key_file_stops_the_server_naming_the_key_and_the_import_and_makes_no_new_key(sealed_home,
                                                                                                tmp_path):
    home, key_id, tokens = sealed_home
    key_file = home / "persmem.key"
    kept = tmp_path / "kept.key"
    kept.write_bytes(key_file.read_bytes())
    key_file.unlink()
    try:
        before = snapshot(home)
        done = refused_start(home, clean_env(home))
        assert done.returncode != 0
        message = done.stdout + done.stderr
        assert "Traceback" not in message, message[-3000:]
        assert key_id in message and "persmem key import" in message, message[-3000:]
        assert snapshot(home) == before and not key_file.exists()  # no fresh key replacing the lost one
    finally:
        kept.rename(key_file)
        os.chmod(key_file, 0o600)
    server = start_server(home, env=clean_env(home))  # the key is back: all reads again
    server.tokens = tokens
    try:
        assert PLANTED["memory_store content"] in server.call_tool("memory_get", {"memory_id": "train"},
                                                                   agent="kite")["content"]
    finally:
        server.stop()
        (home / "server.log").unlink()


def test_a_key_file_others_may_read_is_refused_with_the_chmod_fix(sealed_home):
    home, _, _ = sealed_home
    key_file = home / "persmem.key"
    os.chmod(key_file, 0o644)
    try:
        before = snapshot(home)
        done = refused_start(home, clean_env(home))
        assert done.returncode != 0
        message = done.stdout + done.stderr
        assert "Traceback" not in message, message[-3000:]
        assert f"chmod 600 {key_file}" in message and "0644" in message, message[-3000:]
        assert snapshot(home) == before
    finally:
        os.chmod(key_file, 0o600)

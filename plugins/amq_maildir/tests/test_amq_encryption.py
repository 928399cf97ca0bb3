"""Mail at rest, through real servers and real MCP clients: with `[amq] encrypt = true` what agents wrote
(subjects and bodies) is on no file under the mail root or in a backup, yet every tool reads it back; without it
mail stays persMEM's plain Maildir; `reseal` (what `persmem key migrate|rotate` call, with no server) converts
mail both ways, in place; a sealed message under a key that is not on hand is an error naming the fix, never
quarantined; and kill -9 during a send loop loses no acknowledged message."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest

from persmem_amq_maildir.backup import backup_mail, restore_mail
from persmem_amq_maildir.config import AmqConfig
from persmem_amq_maildir.message import decode
from persmem_amq_maildir.plugin import reseal
from persmem_amq_maildir.store import MailStore
from persmem_core.sdk.testing import (
    EncryptionConfig,
    Host,
    ToolCallError,
    clean_env,
    keys,
    start_server,
    tool_result,
    write_config,
)
from persmem_core.sdk import SEALED_MAGIC, Sealer, is_sealed

NO_MEMORY = {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw"}
SUBJECT_PHRASE = "marzipan-tribunal-6614"
BODY_PHRASE = "velvet-crowbar-2290"
REPLY_PHRASE = "saffron-turbine-4471"
PHRASES = (SUBJECT_PHRASE, BODY_PHRASE, REPLY_PHRASE)
SEALED = {"amq": {"encrypt": True, "readers": {"operator": ["*"]}}}


def start(home: Path, config: dict | None, agents=("kite", "wren", "operator"), tokens: dict | None = None):
    """A real server in `home` (config written first); `tokens` from an earlier start of the same home."""
    write_config(home, config)
    if config is None and (home / "persmem.toml").exists():
        (home / "persmem.toml").unlink()
    running = start_server(home, agents if tokens is None else (), clean_env(home, **NO_MEMORY))
    running.tokens = tokens or running.tokens
    return running


def call(server, tool, caller, /, **args):
    return server.call_tool(tool, args, agent=caller)


def files_with_phrases(root: Path, phrases=PHRASES) -> list[str]:
    return [f"{path}: {phrase}" for path in sorted(p for p in root.rglob("*") if p.is_file())
            for phrase in phrases if phrase.encode() in path.read_bytes()]


def message_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/inbox/*/*.md"))


def home_sealer(home: Path) -> Sealer:
    return keys.load_sealer(home, EncryptionConfig(), clean_env(home), create=False)


def reseal_in_process(home: Path, dry_run: bool = False):
    """What `persmem key migrate` does for this plugin: its `reseal` hook on a Host, with no server running."""
    host = Host(environ=clean_env(home, **NO_MEMORY))
    steps = []
    report = reseal(host, host.sealer, lambda what, done, total: steps.append((what, done, total)), dry_run)
    assert steps[-1][0] == "mail" and steps[-1][1] == steps[-1][2]
    return report


def converse(server) -> str:
    """kite writes wren, wren reads and replies, kite reads the reply; returns the first message's id."""
    sent = call(server, "amq_send", "kite", to_agent="wren", subject=f"About {SUBJECT_PHRASE}",
                body=f"The word is {BODY_PHRASE}.")
    inbox = call(server, "amq_check", "wren")
    assert [m["subject"] for m in inbox["messages"]] == [f"About {SUBJECT_PHRASE}"]
    read = call(server, "amq_read", "wren", agent="wren", msg_id=sent["id"])
    assert read["body"] == f"The word is {BODY_PHRASE}." and read["claimed"] is True
    call(server, "amq_reply", "wren", msg_id=sent["id"], body=f"Heard: {REPLY_PHRASE}")
    [reply] = call(server, "amq_check", "kite")["messages"]
    assert call(server, "amq_read", "kite", agent="kite", msg_id=reply["id"])["body"] == f"Heard: {REPLY_PHRASE}"
    return sent["id"]


def test_with_encrypt_on_no_subject_or_body_is_on_disk_yet_every_tool_reads_them(tmp_path):
    server = start(tmp_path / "home", SEALED)
    try:
        first = converse(server)
        thread = call(server, "amq_thread", "wren", thread_id=first)
        assert [m["body"] for m in thread["messages"]] == [f"The word is {BODY_PHRASE}.", f"Heard: {REPLY_PHRASE}"]
        timeline = call(server, "amq_timeline", "operator")
        assert {m["subject"] for m in timeline["messages"]} == {f"About {SUBJECT_PHRASE}", f"Re: About {SUBJECT_PHRASE}"}
        peek = subprocess.run([sys.executable, "-m", "persmem_core", "amq", "peek", "wren", "--all"],
                              env=clean_env(server.home), capture_output=True, text=True, timeout=60)
        assert peek.returncode == 0 and SUBJECT_PHRASE in peek.stdout, peek.stderr
        sent = subprocess.run([sys.executable, "-m", "persmem_core", "amq", "send", "--from", "operator", "--to",
                               "kite", "--subject", SUBJECT_PHRASE, BODY_PHRASE], env=clean_env(server.home),
                              capture_output=True, text=True, timeout=60)
        assert sent.returncode == 0, sent.stderr
        assert call(server, "amq_check", "kite")["messages"][0]["subject"] == SUBJECT_PHRASE
    finally:
        server.stop()
    root = server.home / "amq"
    files = message_files(root)
    assert len(files) == 3 and all(f.read_bytes().startswith(SEALED_MAGIC) for f in files)
    assert files_with_phrases(root) == []

    # a backup copies the bytes as stored (no key needed); a restored root reads with the home's key
    (tmp_path / "backup").mkdir(mode=0o700)
    backup_mail(root, tmp_path / "backup")
    assert len(message_files(tmp_path / "backup")) == 3 and files_with_phrases(tmp_path / "backup") == []
    restored = tmp_path / "restored"
    restore_mail(restored, tmp_path / "backup")
    sealer = home_sealer(server.home)
    store = MailStore(restored, AmqConfig(encrypt=True), sealer=lambda: sealer).open()
    assert store.read("wren", "", first)["body"] == f"The word is {BODY_PHRASE}."
    assert files_with_phrases(restored) == []


def test_by_default_mail_stays_persmems_plain_maildir(amq_server):
    server = amq_server()
    converse(server)
    files = message_files(server.home / "amq")
    assert len(files) == 2
    for path in files:  # what persMEM and mail tools read: the frontmatter format, in the clear
        assert not is_sealed(path.read_bytes()) and path.read_bytes().startswith(b"---json\n")
        decode(path.read_bytes())
    assert len(files_with_phrases(server.home / "amq")) == 4  # subject twice (Re:), body, reply


def test_a_sealed_message_under_a_key_not_on_hand_is_an_error_never_quarantined(tmp_path):
    server = start(tmp_path / "home", SEALED)
    try:
        converse(server)
        stranger_key = keys.new_key()
        stranger = Sealer({keys.key_id(stranger_key): stranger_key}, keys.key_id(stranger_key), True)
        [original] = [p for p in message_files(server.home / "amq") if p.parts[-4] == "wren"]
        foreign = server.home / "amq" / "wren" / "inbox" / "new" / "20260101T000000-000000_kite_0badc0de.md"
        foreign.write_bytes(stranger.seal(home_sealer(server.home).open(original.read_bytes(), b"amq.message"),
                                          b"amq.message"))
        with pytest.raises(ToolCallError, match=r"0badc0de\.md.*not on hand.*persmem key status"):
            call(server, "amq_check", "wren")
        assert foreign.exists() and not (server.home / "amq" / "wren" / "quarantine").exists()
        assert len(call(server, "amq_history", "kite")["messages"]) == 1  # other inboxes still read
    finally:
        server.stop()


def test_reseal_converts_mail_in_place_both_ways_with_no_server(tmp_path):
    home = tmp_path / "home"
    first = start(home, {"amq": {"readers": {"operator": ["*"]}}})
    try:
        converse(first)
        call(first, "amq_send", "operator", to_agent="wren", subject="unread",
             body=f"still unread {BODY_PHRASE}")
    finally:
        first.stop()
    root = home / "amq"
    before = {p.relative_to(root): p.stat().st_mtime_ns for p in message_files(root)}
    assert len(before) == 3 and all(not is_sealed(p.read_bytes()) for p in message_files(root))

    assert (reseal_in_process(home, dry_run=True).checked, reseal_in_process(home).rewritten) == (3, 0)  # no encrypt
    write_config(home, SEALED)
    dry = reseal_in_process(home, dry_run=True)
    assert (dry.what, dry.checked, dry.rewritten, dry.plain) == ("mail", 3, 3, 3)
    assert all(not is_sealed(p.read_bytes()) for p in message_files(root))  # a dry run writes nothing
    done = reseal_in_process(home)
    assert (done.checked, done.rewritten, done.plain) == (3, 3, 3)
    after = {p.relative_to(root): p.stat().st_mtime_ns for p in message_files(root)}
    assert after == before  # same names, same folders (read or unread), same times
    assert all(is_sealed(p.read_bytes()) for p in message_files(root)) and files_with_phrases(root) == []
    assert not [p for p in root.rglob("tmp/*")]
    assert reseal_in_process(home, dry_run=True).rewritten == 0

    second = start(home, SEALED, tokens=first.tokens)
    try:
        history = call(second, "amq_history", "wren", limit=50)["messages"]
        assert {(m["subject"], m["status"]) for m in history} == {(f"About {SUBJECT_PHRASE}", "read"),
                                                                    ("unread", "unread")}
        unread = [m for m in history if m["status"] == "unread"][0]
        assert call(second, "amq_read", "wren", agent="wren", msg_id=unread["id"])["body"] == \
            f"still unread {BODY_PHRASE}"
    finally:
        second.stop()

    write_config(home, {"amq": {"encrypt": False}})  # and back to plain Maildir
    assert reseal_in_process(home).rewritten == 3
    for path in message_files(root):
        assert decode(path.read_bytes()).header.sender in ("kite", "wren", "operator")


def test_kill_9_during_a_send_loop_loses_no_acknowledged_message(tmp_path):
    home = tmp_path / "home"
    acknowledged: dict[str, int] = {}
    tokens = None
    for round_ in range(3):
        server = start(home, SEALED, tokens=tokens)
        tokens = server.tokens

        async def send_until_killed(cap=300 * (round_ + 1)):  # amq_history shows at most 1,000 (checked below)
            async with server.client("kite") as kite:
                n = len(acknowledged)
                while True:
                    if n >= cap:  # a fast machine: wait for the kill, which no call of ours will notice
                        if killed.is_set():
                            return
                        await anyio.sleep(0.05)
                        continue
                    result = tool_result(await kite.call_tool("amq_send", {
                        "to_agent": "wren", "subject": f"n{n} {SUBJECT_PHRASE}",
                        "body": f"message {n} {BODY_PHRASE} " + "x" * (n % 2000)}))
                    acknowledged[result["id"]] = n
                    n += 1

        killed = threading.Event()
        killer = threading.Timer(random.uniform(0.5, 1.5), lambda: (server.kill(), killed.set()))
        killer.start()
        try:
            anyio.run(send_until_killed)
        except Exception:  # the server went away mid-call (anything else fails below; a timeout is not caught)
            killer.join()
            if not killed.is_set():
                raise
        finally:
            server.stop()
    assert len(acknowledged) > 10
    print(f"send kill -9 loop: {len(acknowledged)} sends acknowledged over 3 kills")
    root = home / "amq"
    assert all(p.read_bytes().startswith(SEALED_MAGIC) for p in message_files(root))
    assert files_with_phrases(root) == []
    final = start(home, SEALED, tokens=tokens)
    try:
        history = {m["id"]: m for m in call(final, "amq_history", "wren", limit=1000)["messages"]}
        for msg_id, n in acknowledged.items():
            assert history[msg_id]["subject"] == f"n{n} {SUBJECT_PHRASE}"
        for msg_id, n in random.sample(sorted(acknowledged.items()), 5):
            body = call(final, "amq_read", "wren", agent="wren", msg_id=msg_id)["body"]
            assert body == f"message {n} {BODY_PHRASE} " + "x" * (n % 2000)
    finally:
        final.stop()

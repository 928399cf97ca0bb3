"""Encryption at rest for the session archive, through real servers and real MCP clients: what a session said
(its transcript, and its title, the start of its first user turn) is on no file in the clear, yet the tools read
it back; archives from before encryption still read and keep appending; `reseal` (what `persmem key
migrate|rotate` call, with no server) converts both ways; kill -9 during captures and during reseal loses no
acknowledged capture and leaves every session readable; data under a key that is not on hand is an error naming
the file, never a session silently skipped."""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import pytest

from persmem_core.sdk.testing import Host, ToolCallError, clean_env, key_id, new_key, write_config
from persmem_core.sdk import Sealer, is_sealed
from persmem_sessions import archive
from persmem_sessions.backup import backup_sessions, restore_sessions
from persmem_sessions.plugin import reseal
from persmem_sessions.reseal import reseal_sessions
from sessions_testkit import NO_MEMORY, archived, capture, home_sealer, serve, socket_client

HERE = Path(__file__).parent
TITLE_PHRASE = "periwinkle-quasar-9143"
BODY_PHRASE = "obsidian-lantern-5827"
LATER_PHRASE = "tangerine-glacier-3306"
PHRASES = (TITLE_PHRASE, BODY_PHRASE, LATER_PHRASE)


def user_line(text: str, second: int = 0) -> str:
    return json.dumps({"type": "user", "timestamp": f"2026-11-04T10:00:{second:02d}Z", "sessionId": "x",
                       "message": {"role": "user", "content": text}})


def assistant_line(text: str, second: int = 1) -> str:
    return json.dumps({"type": "assistant", "timestamp": f"2026-11-04T10:00:{second:02d}Z", "sessionId": "x",
                       "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})


FIRST = [user_line(f"Why does the {TITLE_PHRASE} job stall at night?"), assistant_line(f"It waits on {BODY_PHRASE}.")]
LATER = [user_line(f"And the {LATER_PHRASE} cache?", 2), assistant_line("Cold after each deploy.", 3)]


def readable_views(data: bytes):
    """The bytes as stored, and the inflated content of every gzip member found anywhere in them (a plain
    archive, or a frame holding a bare member, is compressed text: a byte search alone would miss it)."""
    yield data
    at = data.find(b"\x1f\x8b\x08")
    while at >= 0:
        try:
            yield zlib.decompressobj(wbits=31).decompress(data[at:])
        except zlib.error:
            pass
        at = data.find(b"\x1f\x8b\x08", at + 1)


def files_with_phrases(root: Path, phrases=PHRASES) -> list[str]:
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        found += [f"{path}: {phrase}" for view in readable_views(data) for phrase in phrases
                  if phrase.encode() in view]
    return found


def session_files(home: Path, session: str) -> tuple[Path, Path]:
    [gz] = (home / "sessions" / "kite").glob(f"*/claude-{session}.jsonl.gz")
    return gz, Path(str(gz)[: -len(".jsonl.gz")] + ".meta.json")


def turn_texts(server, session: str, agent: str = "kite") -> list[str]:
    reply = server.call_tool("session_read", {"session_id": session, "limit": 200}, agent=agent)
    return [turn["text"] for turn in reply["turns"]]


def restart(home: Path, tokens: dict, **env):
    running = serve(home, agents=(), **env)
    running.tokens = tokens
    return running


def reseal_in_process(home: Path, dry_run: bool = False):
    """What `persmem key migrate` does for this plugin: its `reseal` hook on a Host, with no server running."""
    host = Host(environ=clean_env(home, **NO_MEMORY))
    steps = []
    report = reseal(host, host.sealer, lambda what, done, total: steps.append((what, done, total)), dry_run)
    assert steps and steps[-1][1] == steps[-1][2]
    return report


def test_a_sealed_capture_leaves_no_phrase_on_disk_and_the_tools_read_it_back(tmp_path):
    server = serve(tmp_path / "home")
    try:
        with socket_client(server.home, "kite") as http:
            assert capture(http, FIRST, session_id="sealed-1").status_code == 200
            assert capture(http, LATER, session_id="sealed-1", first_line=2).status_code == 200
        listed = server.call_tool("session_list", {}, agent="kite")["sessions"]
        assert [row["title"] for row in listed] == [f"Why does the {TITLE_PHRASE} job stall at night?"]
        texts = turn_texts(server, "sealed-1")
        assert any(BODY_PHRASE in t for t in texts) and any(LATER_PHRASE in t for t in texts)
        assert server.call_tool("session_list", {}, agent="wren")["sessions"] == []
    finally:
        server.stop()
    gz, meta = session_files(server.home, "sealed-1")
    assert gz.read_bytes().startswith(archive.ARCHIVE_MAGIC) and is_sealed(meta.read_bytes())
    assert files_with_phrases(server.home / "sessions") == []
    assert len(archived(server.home, "kite", "claude", "sealed-1")[0].splitlines()) == 4

    # backups copy the bytes as stored (no key needed); a restore opens them with the home's key
    (tmp_path / "backup").mkdir(mode=0o700)  # the core's backup hands each plugin its folder
    backup_sessions(server.home / "sessions", tmp_path / "backup")
    assert files_with_phrases(tmp_path / "backup") == []
    sealer = home_sealer(server.home)
    restored = tmp_path / "restored"
    assert restore_sessions(restored, tmp_path / "backup", sealer) == ["kite"]
    [(base, meta_back)] = list(archive.scan(restored, sealer))
    assert meta_back.indexed_lines == 0 and meta_back.title.startswith("Why does the " + TITLE_PHRASE)
    assert is_sealed(Path(str(base) + archive.META_SUFFIX).read_bytes())
    assert [json.loads(line)["type"] for line in archive.read_lines(base, meta_back, sealer)] == ["user",
                                                                                                  "assistant"] * 2
    assert files_with_phrases(restored) == []


def test_a_plaintext_archive_from_before_keeps_appending_and_reseal_converts_it_both_ways(tmp_path):
    home = tmp_path / "home"
    write_config(home, {"encryption": {"enabled": False}})
    first = serve(home)
    try:
        with socket_client(home, "kite") as http:
            assert capture(http, FIRST, session_id="old-1").status_code == 200
    finally:
        first.stop()
    gz, meta = session_files(home, "old-1")
    assert gz.read_bytes().startswith(b"\x1f\x8b") and json.loads(meta.read_bytes())["lines"] == 2
    assert files_with_phrases(home / "sessions")  # plaintext, as asked

    (home / "persmem.toml").unlink()  # encryption on, as for a new home: a key is made at this start
    second = restart(home, first.tokens)
    try:
        assert any(BODY_PHRASE in t for t in turn_texts(second, "old-1"))
        with socket_client(home, "kite") as http:
            assert capture(http, LATER, session_id="old-1", first_line=2).json()["total_lines"] == 4
        assert any(LATER_PHRASE in t for t in turn_texts(second, "old-1"))
    finally:
        second.stop()
    assert gz.read_bytes().startswith(b"\x1f\x8b")  # the file keeps its format until a reseal...
    assert len(gzip.decompress(gz.read_bytes()).splitlines()) == 4  # ...and stays whole gzip (zcat reads it)
    assert is_sealed(meta.read_bytes())  # the metadata (the title) is sealed at its first write

    dry = reseal_in_process(home, dry_run=True)  # the archive, and its metadata for the new length
    assert (dry.checked, dry.rewritten, dry.plain) == (2, 2, 1)
    assert gz.read_bytes().startswith(b"\x1f\x8b")  # a dry run writes nothing
    done = reseal_in_process(home)
    assert (done.what, done.checked, done.rewritten, done.plain) == ("sessions", 2, 2, 1)
    assert gz.read_bytes().startswith(archive.ARCHIVE_MAGIC) and files_with_phrases(home / "sessions") == []
    assert reseal_in_process(home, dry_run=True).rewritten == 0  # nothing left to do

    third = restart(home, first.tokens)
    try:
        texts = turn_texts(third, "old-1")
        assert len(texts) == 4 and TITLE_PHRASE in texts[0] and LATER_PHRASE in texts[2]
        with socket_client(home, "kite") as http:
            reply = capture(http, [assistant_line("after the reseal", 4)], session_id="old-1", first_line=4)
            assert reply.json()["total_lines"] == 5
        assert turn_texts(third, "old-1")[-1] == "after the reseal"
    finally:
        third.stop()

    write_config(home, {"encryption": {"enabled": False}})  # and back: plaintext again, zcat reads it
    assert reseal_in_process(home).rewritten == 2
    assert len(gzip.decompress(gz.read_bytes()).splitlines()) == 5 and not is_sealed(meta.read_bytes())
    fourth = restart(home, first.tokens)
    try:
        assert len(turn_texts(fourth, "old-1")) == 5
    finally:
        fourth.stop()


def test_a_reseal_killed_between_archive_and_metadata_leaves_the_session_readable(tmp_path):
    server = serve(tmp_path / "home")
    try:
        with socket_client(server.home, "kite") as http:
            capture(http, FIRST, session_id="torn-reseal")
    finally:
        server.stop()
    home = server.home
    gz, meta_file = session_files(home, "torn-reseal")
    sealer = home_sealer(home)
    base = Path(str(gz)[: -len(".jsonl.gz")])
    meta = archive.load_meta(base, sealer)
    # what reseal does before it writes the metadata: the whole archive in the other format, renamed into place
    tmp = Path(str(gz) + ".reseal")
    archive.write_archive(tmp, [b"".join(archive.raw_lines(base, meta, sealer))], sealer, sealed=False)
    os.rename(tmp, gz)
    assert archive.load_meta(base, sealer).archive_id == meta.archive_id != ""  # the metadata is the old one

    again = restart(home, server.tokens)
    try:
        assert len(turn_texts(again, "torn-reseal")) == 2
        with socket_client(home, "kite") as http:
            assert capture(http, LATER, session_id="torn-reseal", first_line=2).json()["total_lines"] == 4
        assert len(turn_texts(again, "torn-reseal")) == 4
    finally:
        again.stop()
    repaired = archive.load_meta(base, sealer)
    assert repaired.archive_id == "" and repaired.archive_bytes == gz.stat().st_size
    assert is_sealed(meta_file.read_bytes())


def test_kill_9_during_a_capture_loop_loses_no_acknowledged_capture(tmp_path):
    home = tmp_path / "home"
    tokens = None
    acknowledged = 0
    expected = [assistant_line(f"line {n} {BODY_PHRASE} " + "z" * (n % 700), n % 60) for n in range(100_000)]
    for _ in range(3):
        running = serve(home) if tokens is None else restart(home, tokens)
        tokens = running.tokens
        try:
            with socket_client(home, "kite") as http:
                stored = http.get("/sessions/capture/claude/kill-loop").json()["lines"]
                assert stored in (acknowledged, acknowledged + 1)  # at most the one in flight when killed
                text, _ = archived(home, "kite", "claude", "kill-loop") if stored else ("", {})
                assert text.splitlines() == expected[:stored]
                killed = threading.Event()
                killer = threading.Timer(random.uniform(0.3, 1.2), lambda: (running.kill(), killed.set()))
                killer.start()
                try:
                    while True:
                        reply = capture(http, [expected[stored]], session_id="kill-loop", first_line=stored)
                        assert reply.status_code == 200, reply.text
                        stored = acknowledged = reply.json()["total_lines"]
                except Exception:  # the server went away mid-request (anything else fails the test below)
                    killer.join()
                    if not killed.is_set():
                        raise
        finally:
            running.stop()
    assert acknowledged > 10
    print(f"capture kill -9 loop: {acknowledged} captures acknowledged over 3 kills")
    final = restart(home, tokens)
    try:
        last = final.call_tool("session_read", {"session_id": "kill-loop", "offset": acknowledged - 1, "limit": 1},
                               agent="kite")
        assert last["total_turns"] >= acknowledged
        assert last["turns"][0]["text"] == json.loads(expected[acknowledged - 1])["message"]["content"][0]["text"]
    finally:
        final.stop()
    text, meta = archived(home, "kite", "claude", "kill-loop")
    assert text.splitlines() == expected[:meta["lines"]] and meta["lines"] >= acknowledged
    assert files_with_phrases(home / "sessions") == []


def test_kill_9_during_reseal_rotation_and_migration_leaves_every_session_readable(tmp_path):
    server = serve(tmp_path / "home")
    sessions = {f"many-{n}": [user_line(f"session {n} asks {TITLE_PHRASE}"), assistant_line(f"{n} {BODY_PHRASE}")]
                + [assistant_line(f"{n}.{i} " + "q" * 3000, i % 60) for i in range(40 * n)] for n in range(1, 6)}
    try:
        with socket_client(server.home, "kite") as http:
            for session, lines in sessions.items():
                assert capture(http, lines, session_id=session).status_code == 200
    finally:
        server.stop()
    home = server.home
    key_a = (home / "persmem.key").read_bytes()
    key_b = new_key()
    both = Sealer({key_id(key_a): key_a, key_id(key_b): key_b}, None, False)
    passes, kills, step = 0, 0, 0
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline and kills < 40:
        proc = subprocess.Popen([sys.executable, str(HERE / "resealer_for_kill.py"), str(home), key_a.hex(),
                                 key_b.hex(), str(step)], stdout=subprocess.PIPE, text=True,
                                env=clean_env(home, PYTHONPATH=str(HERE)))
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(random.uniform(0.0, 0.4))
        proc.kill()
        out, _ = proc.communicate()
        kills += 1
        finished = [line.split() for line in out.splitlines() if line.startswith("R ")]
        passes += len(finished)
        step = int(finished[-1][1]) + 1 if finished else step
        for base, meta in archive.scan(home / "sessions", both):  # readable as it is, before any repair
            lines = [line.decode().rstrip("\n") for line in archive.raw_lines(base, meta, both)]
            assert lines == sessions[meta.session_id], f"after kill {kills}: {base}"
    assert kills >= 5 and passes >= 1
    print(f"reseal kill -9 sweep: {kills} kills, {passes} whole passes finished between them")
    # end sealed under key A (the home's key) and read it through a server
    reseal_sessions(home / "sessions", Sealer({key_id(key_a): key_a, key_id(key_b): key_b}, key_id(key_a), True),
                    lambda *_: None, False)
    leftovers = [p for p in (home / "sessions").rglob("*") if p.name.endswith((".reseal", ".tmp"))]
    assert leftovers == [] and files_with_phrases(home / "sessions") == []
    final = restart(home, server.tokens)
    try:
        for session, lines in sessions.items():
            reply = final.call_tool("session_read", {"session_id": session, "limit": 200}, agent="kite")
            assert reply["total_turns"] == len(lines)
    finally:
        final.stop()


def test_data_under_a_key_not_on_hand_is_an_error_naming_the_file(tmp_path):
    server = serve(tmp_path / "home")
    try:
        with socket_client(server.home, "kite") as http:
            capture(http, FIRST, session_id="foreign-frame")
            capture(http, FIRST, session_id="foreign-meta")
    finally:
        server.stop()
    home = server.home
    stranger = Sealer({key_id(k := new_key()): k}, key_id(k), True)
    sealer = home_sealer(home)

    # an archive frame sealed under another key: reading that session names the file; the others still read
    gz, _ = session_files(home, "foreign-frame")
    base = Path(str(gz)[: -len(".jsonl.gz")])
    meta = archive.load_meta(base, sealer)
    blocks = [b"".join(archive.raw_lines(base, meta, sealer))]
    archive_id, length = archive.write_archive(gz, blocks, stranger, sealed=True)
    meta.archive_id, meta.archive_bytes = archive_id, length
    archive.write_meta(base, meta, sealer)
    again = restart(home, server.tokens)
    try:
        with pytest.raises(ToolCallError, match=r"foreign-frame\.jsonl\.gz.*not on hand"):
            turn_texts(again, "foreign-frame")
        assert len(turn_texts(again, "foreign-meta")) == 2
    finally:
        again.stop()

    # metadata under another key stops the start, naming the file, instead of the session quietly vanishing
    _, meta_file = session_files(home, "foreign-meta")
    foreign = stranger.seal(sealer.open(meta_file.read_bytes(), b"sessions.meta"), b"sessions.meta")
    meta_file.write_bytes(foreign)
    with pytest.raises(RuntimeError, match=r"claude-foreign-meta\.meta\.json.*not on hand"):
        restart(home, server.tokens)
    assert meta_file.read_bytes() == foreign  # left as it was: nothing was rewritten

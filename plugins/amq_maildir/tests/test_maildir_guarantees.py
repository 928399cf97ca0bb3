"""The Maildir guarantees, on the files: no partial message ever visible, unique names, no clobbering,
durable acknowledged sends under kill -9, exactly one claimant, stale tmp cleaned, bad files quarantined."""

import errno
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from persmem_amq_maildir import maildir
from persmem_amq_maildir.message import decode
from persmem_core.sdk import UserError

HERE = Path(__file__).parent


def inbox(store, agent):
    return store.root / agent / "inbox"


def test_send_writes_persmem_layout_and_nothing_is_left_in_tmp(store):
    result = store.send("kite", "wren", "Hello **wren**", subject="hi", kind="question", priority="urgent")
    files = os.listdir(inbox(store, "wren") / "new")
    assert files == [result["id"] + ".md"]
    assert os.listdir(inbox(store, "wren") / "tmp") == [] and os.listdir(inbox(store, "wren") / "cur") == []
    message = decode((inbox(store, "wren") / "new" / files[0]).read_bytes())
    assert (message.header.sender, message.header.to, message.header.kind, message.body) == (
        "kite", "wren", "question", "Hello **wren**")
    assert oct((inbox(store, "wren") / "new" / files[0]).stat().st_mode & 0o777) == "0o600"


def test_names_are_unique_and_delivery_never_clobbers(store):
    ids = {store.send("kite", "wren", f"m{i}")["id"] for i in range(300)}
    assert len(ids) == 300 and len(os.listdir(inbox(store, "wren") / "new")) == 300
    box = store.box("wren")
    name = sorted(os.listdir(inbox(store, "wren") / "new"))[0]
    before = (inbox(store, "wren") / "new" / name).read_bytes()
    with pytest.raises(FileExistsError):
        box.deliver(name, b"---json\n{}\n---\nclobber\n")
    assert (inbox(store, "wren") / "new" / name).read_bytes() == before
    assert os.listdir(inbox(store, "wren") / "tmp") == []


def test_a_name_clash_gives_the_message_a_new_id_and_send_returns_the_id_it_was_delivered_under(store, monkeypatch):
    """Two sends in one microsecond with the same random part (forced here) must not clobber, and the id the caller
    gets back is the one the message can be read by."""
    from persmem_amq_maildir import store as store_module

    first = store.send("kite", "wren", "the first")["id"]
    fresh = iter([first, first.replace(first[-8:], "0badc0de")])
    monkeypatch.setattr(store_module, "new_id", lambda sender: next(fresh))
    sent = store.send("kite", "wren", "the second")
    assert sent["id"] == first.replace(first[-8:], "0badc0de") and "ids" not in sent
    names = sorted(os.listdir(inbox(store, "wren") / "new"))
    assert names == sorted([first + ".md", sent["id"] + ".md"])
    assert decode((inbox(store, "wren") / "new" / (sent["id"] + ".md")).read_bytes()).body.strip() == "the second"


@pytest.mark.parametrize("step", ["write", "fsync-file", "link", "fsync-dir"])
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC])
def test_injected_io_errors_report_failure_and_leave_nothing_visible(store, monkeypatch, step, code):
    store.send("kite", "wren", "first")  # the mailbox exists; the failure hits a real delivery
    real = {"write": os.write, "fsync": os.fsync, "link": os.link}
    calls = {"fsync": 0}

    def fail(*_a, **_k):
        raise OSError(code, os.strerror(code))

    if step == "write":
        monkeypatch.setattr(maildir.os, "write", fail)
    elif step == "link":
        monkeypatch.setattr(maildir.os, "link", fail)
    else:
        def fsync(fd):
            calls["fsync"] += 1
            is_dir = os.path.isdir(f"/proc/self/fd/{fd}")
            if (step == "fsync-dir") == is_dir:
                fail()
            return real["fsync"](fd)

        monkeypatch.setattr(maildir.os, "fsync", fsync)
    with pytest.raises(UserError, match=os.strerror(code)):
        store.send("kite", "wren", "second, must not appear")
    monkeypatch.undo()
    new = inbox(store, "wren") / "new"
    bodies = [decode((new / n).read_bytes()).body for n in os.listdir(new)]
    assert bodies == ["first"] and os.listdir(inbox(store, "wren") / "tmp") == []
    assert store.check("wren")["new_count"] == 1


def test_kill_9_sweep_loses_no_acknowledged_send(tmp_path):
    root = tmp_path / "amq"
    acknowledged: dict[str, int] = {}
    deadline = time.monotonic() + 20
    kills = 0
    while time.monotonic() < deadline and kills < 150:
        proc = subprocess.Popen([sys.executable, str(HERE / "writer_for_kill.py"), str(root)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(random.uniform(0.0, 0.05))
        proc.kill()
        out, _ = proc.communicate()
        kills += 1
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[0] == "S":
                acknowledged[parts[1]] = int(parts[2])
    assert kills >= 20 and len(acknowledged) > 50
    new = root / "wren" / "inbox" / "new"
    visible = {}
    for name in os.listdir(new):
        message = decode((new / name).read_bytes())  # every visible file parses: nothing partial
        visible[name[:-3]] = message
    for msg_id, i in acknowledged.items():
        assert visible[msg_id].header.subject == f"n{i}"
        assert visible[msg_id].body == f"message {i} " + "x" * (i % 3000)


def test_exactly_one_of_several_processes_claims_each_message(store, tmp_path):
    ids = [store.send("kite", "wren", f"claim me {i}")["id"] for i in range(200)]
    go = tmp_path / "go"
    procs = [subprocess.Popen([sys.executable, str(HERE / "claimer.py"), str(store.root / "wren"), str(go)],
                              stdout=subprocess.PIPE, text=True) for _ in range(6)]
    time.sleep(0.5)
    go.touch()
    won = [name for p in procs for name in json.loads(p.communicate(timeout=60)[0])["won"]]
    assert sorted(won) == sorted(i + ".md" for i in ids)  # each message exactly once, none lost
    assert len(os.listdir(inbox(store, "wren") / "cur")) == 200 and os.listdir(inbox(store, "wren") / "new") == []


def test_stale_tmp_files_are_cleaned_at_open_fresh_ones_kept(store):
    store.send("kite", "wren", "make the mailbox")
    tmp = inbox(store, "wren") / "tmp"
    (tmp / "old.md").write_text("interrupted long ago")
    (tmp / "fresh.md").write_text("being written right now")
    old = time.time() - 40 * 3600
    os.utime(tmp / "old.md", (old, old))
    type(store)(store.root, store.config).open()
    assert os.listdir(tmp) == ["fresh.md"]


def test_malformed_and_hostile_files_are_quarantined_and_reported_never_crash(store, hostile_files):
    good = store.send("kite", "wren", "the one real message")["id"]
    new = inbox(store, "wren") / "new"
    hostile_files(new)
    checked = store.check("wren")
    assert [m["id"] for m in checked["messages"]] == [good]
    reported = {q["file"] for q in checked["quarantined"]}
    assert reported == {"empty.md", "no-frontmatter.md", "unclosed.md", "bad-json.md", "missing-fields.md",
                        "wrong-types.md", "latin1.md", "huge.md", "symlink.md", "fifo.md", "folder.md"}
    assert os.listdir(new) == [good + ".md"]
    assert len(store.box("wren").quarantined()) == 11
    assert Path("/etc/passwd").exists()  # the link was moved, not its target
    assert store.check("wren")["new_count"] == 1 and "quarantined" not in store.check("wren")
    with pytest.raises(UserError, match="invalid msg_id"):
        store.read("wren", "", "../kite/inbox/new/x")


def test_a_mailbox_removed_while_serving_is_made_again_on_the_next_send(store):
    import shutil

    store.send("kite", "wren", "before")
    shutil.rmtree(store.root / "wren")
    store.send("kite", "wren", "after")
    assert [m["subject"] for m in store.check("wren")["messages"]] == [""] and store.check("wren")["new_count"] == 1

"""Serving a mailbox persMEM wrote, hostile files through the server, any tool arguments, CLI, doctor, backup."""

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persmem_core.sdk.testing import assert_tools_answer_clearly

from persmem_amq_maildir.message import decode


def persmem_write(root, sender, to, subject, body, when, kind="message", priority="normal", folder="new"):
    """A message file exactly as persMEM's server.py writes it (json.dumps, indent 2, ASCII escapes)."""
    msg_id = f"{when.strftime('%Y%m%dT%H%M%S-%f')}_{sender}_{os.urandom(4).hex()}"
    headers = {"schema": 1, "id": msg_id, "from": sender, "to": to, "subject": subject, "kind": kind,
               "priority": priority, "created": when.isoformat()}
    path = root / to / "inbox" / folder
    path.mkdir(parents=True, exist_ok=True)
    for sub in ("tmp", "new", "cur"):
        (root / to / "inbox" / sub).mkdir(exist_ok=True)
    (path / f"{msg_id}.md").write_text(f"---json\n{json.dumps(headers, indent=2)}\n---\n{body}\n")
    return msg_id


def persmem_parse(data: str) -> dict:
    """persMEM's own parser (_amq_parse_message), to check files we write stay readable by it."""
    rest = data.split("---json\n", 1)[1].split("\n---\n", 1)
    return json.loads(rest[0]) | {"body": rest[1]}


def test_a_mailbox_written_by_persmem_is_served_as_is(tmp_path, amq_server):
    legacy = tmp_path / "persmem-amq"
    t0 = datetime(2026, 4, 11, 9, 0, tzinfo=UTC)
    old = persmem_write(legacy, "wren", "kite", "Caf\u00e9 notes", "Read **this** \u2014 ok", t0, folder="cur")
    new = persmem_write(legacy, "wren", "kite", "Review", "Please review PR 12", t0 + timedelta(hours=1),
                        kind="review_request", priority="urgent")
    (legacy / "kite" / "inbox" / "new" / "notes.txt").write_text("not a message file; persMEM ignores it too")
    server = amq_server({"amq": {"root": str(legacy)}}, agents=("kite", "wren"))
    inbox = server.call_tool("amq_check", {"agent": "kite"}, agent="kite")
    assert [m["id"] for m in inbox["messages"]] == [new] and inbox["messages"][0]["kind"] == "review_request"
    history = server.call_tool("amq_history", {"agent": "kite"}, agent="kite")["messages"]
    assert [(m["id"], m["status"]) for m in history] == [(new, "unread"), (old, "read")]
    read = server.call_tool("amq_read", {"agent": "kite", "msg_id": old}, agent="kite")
    assert read["subject"] == "Caf\u00e9 notes" and read["body"] == "Read **this** \u2014 ok"
    reply = server.call_tool("amq_reply", {"msg_id": new, "body": "Looks good \u2705"}, agent="kite")
    written = (legacy / "wren" / "inbox" / "new" / f"{reply['id']}.md").read_text()
    parsed = persmem_parse(written)
    assert parsed["from"] == "kite" and parsed["to"] == "wren" and parsed["body"] == "Looks good \u2705\n"
    assert list(parsed)[:8] == ["schema", "id", "from", "to", "subject", "kind", "priority", "created"]
    assert (legacy / "kite" / "inbox" / "new" / "notes.txt").exists()


@pytest.mark.maildir_only
def test_hostile_files_in_a_served_mailbox_are_quarantined_and_reported(server, hostile_files):
    server.call_tool("amq_send", {"to_agent": "wren", "body": "real"}, agent="kite")
    hostile_files(server.home / "amq" / "wren" / "inbox" / "new")
    checked = server.call_tool("amq_check", {}, agent="wren")
    assert "real" not in json.dumps(checked["quarantined"]) and len(checked["quarantined"]) == 11
    assert all(m["from"] == "kite" for m in checked["messages"])
    doctor = subprocess.run([sys.executable, "-m", "persmem_core", "doctor"], env=server.env, capture_output=True,
                            text=True, timeout=60)
    assert "amq mailbox wren" in doctor.stdout and "11 quarantined" in doctor.stdout
    assert server.call_tool("persmem_whoami", {}, agent="wren")["agent"] == "wren"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    to=st.one_of(st.text(max_size=60), st.sampled_from(["wren", "all", "kite,wren", "../wren", "WREN "]), st.none(),
                 st.integers()),
    body=st.one_of(st.text(max_size=2000), st.just("\x00\ud7ff\U0010ffff\n---\n"), st.integers()),
    kind=st.one_of(st.sampled_from(["question", "", "QUESTION"]), st.text(max_size=20)),
    msg_id=st.one_of(st.text(max_size=300), st.just("../../../etc/passwd"), st.just("a" * 5000)),
    limit=st.one_of(st.integers(-5, 100_000), st.text(max_size=3), st.none()),
)
def test_any_arguments_give_a_result_or_a_clear_error(server, to, body, kind, msg_id, limit):
    assert_tools_answer_clearly(server, [
        ("amq_send", {"to_agent": to, "body": body, "kind": kind}),
        ("amq_read", {"agent": "", "msg_id": msg_id}),
        ("amq_history", {"limit": limit, "kind": kind}),
        ("amq_thread", {"thread_id": msg_id}),
    ], "kite")


@pytest.mark.maildir_only
def test_cli_status_send_peek_and_backup(server, tmp_path):
    def cli(*args, stdin=None):
        return subprocess.run([sys.executable, "-m", "persmem_core", *args], env=server.env, input=stdin,
                              capture_output=True, text=True, timeout=60)

    sent = cli("amq", "send", "--from", "operator", "--to", "kite", "--subject", "from the shell", stdin="hello kite\n")
    assert sent.returncode == 0, sent.stderr
    msg_id = json.loads(sent.stdout)["id"]
    assert server.call_tool("amq_read", {"agent": "", "msg_id": msg_id}, agent="kite")["body"] == "hello kite\n"
    refused = cli("amq", "send", "--from", "operator", "--to", "heron", "x")
    assert refused.returncode == 1 and "unknown recipient 'heron'" in refused.stderr
    status = cli("amq", "status")
    assert "kite" in status.stdout and "unread" in status.stdout
    assert msg_id in cli("amq", "peek", "kite", "--all").stdout
    backup = cli("backup", str(tmp_path / "bk"))
    assert backup.returncode == 0, backup.stderr
    copies = list((tmp_path / "bk").rglob(f"{msg_id}.md"))
    assert len(copies) == 1 and copies[0].parent.name == "cur"
    assert decode(copies[0].read_bytes()).body == "hello kite\n"

"""Two plugins through a hook, not an import: memory's chorus_init carries the mail plugin's section of what a
session starts with (the core's briefing_sections hook, the same a hooked session's briefing carries)."""

import json

from persmem_core.testing import clean_env, start_server


def test_chorus_init_reports_unread_mail_by_subject_without_claiming_it(tmp_path):
    server = start_server(tmp_path / "home", agents=("kite", "wren"))
    try:
        server.call_tool("bootstrap_update", {"entry_id": "kite-identity", "content": "I am kite, the reviewer."},
                         agent="kite")
        for i in range(2):
            server.call_tool("amq_send", {"to_agent": "kite", "body": f"note {i}",
                                          "subject": f"s{i}"}, agent="wren")
        boot = server.call_tool("chorus_init", {"agent": "kite", "project": "triad"}, agent="kite")
        assert [p["id"] for p in boot["pinned"]] == ["kite-identity"]
        [mail] = boot["sections"]  # the memory plugin's own part is pinned/handoffs, not a section again
        first, *lines = mail["text"].split("\n")
        assert mail["title"] == "Unread mail" and first.startswith("2 unread messages")
        # One JSON line per message, sender and subject, never the body: another agent's words stay data.
        assert sorted(json.loads(line)["subject"] for line in lines) == ["s0", "s1"]
        assert "note 0" not in mail["text"] and {json.loads(line)["from"] for line in lines} == {"wren"}
        assert server.call_tool("amq_check", {}, agent="kite")["new_count"] == 2  # peeked, not claimed
        assert server.call_tool("chorus_init", {}, agent="wren")["sections"] == []
    finally:
        server.stop()


def test_chorus_init_without_a_mail_plugin_has_no_mail_section(tmp_path):
    home = tmp_path / "home"
    server = start_server(home, agents=("kite",), env=clean_env(home, PERSMEM_DISABLE_PLUGINS="amq_maildir"))
    try:
        names = {t.name for t in server.list_tools(agent="kite")}
        assert "chorus_init" in names and "amq_send" not in names
        assert server.call_tool("chorus_init", {}, agent="kite")["sections"] == []
    finally:
        server.stop()

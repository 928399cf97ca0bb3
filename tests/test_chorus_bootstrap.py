"""Two plugins through a hook, not an import: memory's chorus_init asks the mail plugin for unread mail."""

from persmem_core.testing import clean_env, start_server


def test_chorus_init_reports_unread_mail_without_claiming_it(tmp_path):
    server = start_server(tmp_path / "home", agents=("kite", "wren"))
    try:
        server.call_tool("bootstrap_update", {"entry_id": "kite-identity", "content": "I am kite, the reviewer."},
                         agent="kite")
        for i in range(2):
            server.call_tool("amq_send", {"from_agent": "wren", "to_agent": "kite", "body": f"note {i}",
                                          "subject": f"s{i}"}, agent="wren")
        boot = server.call_tool("chorus_init", {"agent": "kite", "project": "triad"}, agent="kite")
        assert [p["id"] for p in boot["pinned"]] == ["kite-identity"]
        assert boot["inbox"]["available"] and boot["inbox"]["unread"] == 2
        assert sorted(m["body"] for m in boot["inbox"]["messages"]) == ["note 0", "note 1"]
        assert server.call_tool("amq_check", {}, agent="kite")["new_count"] == 2  # peeked, not claimed
        assert server.call_tool("chorus_init", {}, agent="wren")["inbox"]["unread"] == 0
    finally:
        server.stop()


def test_chorus_init_without_a_mail_plugin_says_so(tmp_path):
    home = tmp_path / "home"
    server = start_server(home, agents=("kite",), env=clean_env(home, PERSMEM_DISABLE_PLUGINS="amq_maildir"))
    try:
        names = {t.name for t in server.list_tools(agent="kite")}
        assert "chorus_init" in names and "amq_send" not in names
        assert server.call_tool("chorus_init", {}, agent="kite")["inbox"]["available"] is False
    finally:
        server.stop()

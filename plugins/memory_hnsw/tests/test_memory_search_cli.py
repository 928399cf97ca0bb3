"""`persmem memory search QUERY` as a user runs it: through the running server (the home's local socket), as the
agent named (its view: another agent's private memories stay out), and with no server running, holding the home
for the search. A hit a line (id, score, a snippet), or a JSON list with --json."""

from __future__ import annotations

import json
import subprocess

from persmem_core.sdk.testing import clean_env, persmem_command, start_server



def search(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(persmem_command("memory", "search", *args), env=env, capture_output=True, text=True,
                          timeout=180)


def test_search_through_the_running_server_and_without_one(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "persmem.toml").write_text('[memory]\nprivate_collections = ["sessions", "diary"]\n')
    env = clean_env(home)
    server = start_server(home, agents=("kite", "wren"), env=env)
    try:
        kept = server.call_tool("memory_store", {"content": "The heron thumbnails live in the cold-storage bucket "
                                                 "heron-thumbs, with a 30 day lifecycle rule.", "project": "heron"},
                                agent="kite")["id"]
        server.call_tool("memory_store", {"content": "Atlas tiles are rendered by the zoom-12 preset.",
                                          "project": "atlas"}, agent="kite")
        secret = server.call_tool("memory_store", {"content": "Kite's diary: the heron bucket worries me.",
                                                   "collection": "diary"}, agent="kite")["id"]

        shown = search(env, "where are heron thumbnails kept", "--agent", "kite")
        assert shown.returncode == 0, shown.stderr
        first = shown.stdout.splitlines()[0].split()
        assert first[0] == kept and 0 < float(first[1]) <= 1 and "heron-thumbs" in shown.stdout

        listed = search(env, "heron thumbnails", "--json", "--limit", "1", "--project", "heron", "--agent", "kite")
        hits = json.loads(listed.stdout)
        assert isinstance(hits, list) and [h["id"] for h in hits] == [kept] and "score" in hits[0]

        assert secret in search(env, "diary heron", "--collection", "diary", "--json", "--agent", "kite").stdout
        theirs = search(env, "diary heron", "--collection", "diary", "--json", "--agent", "wren")
        assert theirs.returncode == 0 and secret not in theirs.stdout  # wren's view: kite's private diary is not in it

        unknown = search(env, "heron", "--agent", "nobody")
        assert unknown.returncode != 0 and "no agent named 'nobody'" in unknown.stderr + unknown.stdout
    finally:
        server.stop()

    alone = search(env, "where are heron thumbnails kept", "--json", "--agent", "kite")  # no server: holds the home
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout)[0]["id"] == kept

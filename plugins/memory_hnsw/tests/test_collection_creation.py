"""Reads never create a collection; a write into a new name does, up to [memory] max_collections (issue 32).

Through a real `persmem serve`, a real MCP client, the dashboard over HTTP and the CLI. Before, every read naming
a new collection made one (60 memory_get calls: 60 collections, +100 MB resident, all reopened at every start).
"""

from __future__ import annotations

import json
import subprocess
import time

import anyio
import httpx2
import pytest

from persmem_core.sdk.testing import ToolCallError, persmem_command, start_server, write_config

CAP = 4


def outcomes(server, calls, agent="kite"):
    """(is_error, text) of each (tool, arguments) call, in one MCP session."""

    async def run():
        async with server.client(agent) as client:
            done = []
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
                done.append((result.is_error, "\n".join(getattr(block, "text", "") for block in result.content)))
            return done

    return anyio.run(run)


def collections(server):
    return {c["name"] for c in server.call_tool("memory_list_collections", {}, agent="kite")["collections"]}


def folders(server):
    return {path.name for path in (server.home / "memory").iterdir() if path.is_dir() and path.name[0] != "."}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    write_config(home, {"memory": {"max_collections": CAP}})
    running = start_server(home, agents=("kite", "wren"))
    yield running
    running.stop()


def test_sixty_memory_get_calls_naming_new_collections_make_none(server):
    assert collections(server) == {"memories"}  # the default collection is there from the start (once loaded)
    before = folders(server)
    assert before == {"memories"}
    said = outcomes(server, [("memory_get", {"memory_id": "m1", "collection": f"probe-{n}"}) for n in range(60)])
    assert all(error for error, _ in said)
    assert "no collection 'probe-0'" in said[0][1] and "'memories'" in said[0][1]  # names what exists
    assert "Reads never create a collection" in said[0][1]
    assert folders(server) == before and collections(server) == {"memories"}


def test_no_read_tool_makes_a_collection(server):
    reads = [
        ("memory_search", {"query": "deploy key", "collection": "r-search"}),
        ("memory_search", {"query": "deploy key", "collection": "r-search-s", "include_sessions": True}),
        ("memory_search", {"query": "deploy key", "include_sessions": True}),  # no sessions collection yet
        ("memory_stats", {"collection": "r-stats"}),
        ("memory_get", {"memory_id": "x", "collection": "r-get", "include_history": True}),
        ("memory_update", {"memory_id": "x", "content": "y", "collection": "r-update"}),
        ("memory_delete", {"memory_id": "x", "collection": "r-delete"}),
        ("memory_validate", {"memory_id": "x", "helpful": True, "collection": "r-validate"}),
        ("memory_unlink", {"memory_id": "x", "collection": "r-unlink"}),
        ("memory_consolidate", {"collection": "r-consolidate", "dry_run": False}),
        ("memory_get", {"memory_id": "x", "collection": "sessions"}),  # a private collection nobody wrote yet
        ("session_search", {"query": "deploy key"}),
        ("session_list", {}),
        ("chorus_init", {}),
        ("memory_list_collections", {}),
    ]
    said = dict(zip([f"{name} {args.get('collection', '')}" for name, args in reads], outcomes(server, reads),
                    strict=True))
    for call, (error, text) in said.items():
        assert "internal error" not in text, (call, text)
    assert said["memory_update r-update"][0] and "no collection 'r-update'" in said["memory_update r-update"][1]
    assert "no collection 'sessions'" in said["memory_get sessions"][1]
    assert json.loads(said["memory_stats r-stats"][1])["count"] == 0
    assert folders(server) == {"memories"} and collections(server) == {"memories"}


def test_dashboard_views_naming_a_new_collection_make_none(server):
    base = server.url.replace("/mcp", "/dashboard")
    with httpx2.Client(timeout=30) as client:
        form = client.get(base + "/login")
        token = form.text.split('name="_csrf_token" value="', 1)[1].split('"', 1)[0]
        assert client.post(base + "/login", data={"token": server.tokens["kite"], "_csrf_token": token}).status_code < 400
        for view in ("overview", "memories", "lifecycle"):
            for query in ("collection=d-view", "collection=d-view&q=deploy+key", "collection=d-view&id=m1&preview=1"):
                assert client.get(f"{base}/{view}?{query}").status_code == 200
    assert folders(server) == {"memories"}


def test_writes_make_collections_up_to_the_cap_and_then_say_which_setting_to_raise(server):
    made = [f"w-{n}" for n in range(CAP - 1)]  # with `memories`, the cap
    for name in made:
        assert server.call_tool("memory_store", {"content": f"a note for {name}", "collection": name},
                                agent="kite")["status"] == "stored"
    with pytest.raises(ToolCallError) as refused:
        server.call_tool("memory_bulk_store", {"chunks": [{"content": "one too many"}], "collection": "w-over"},
                         agent="wren")
    message = str(refused.value)
    assert "collection 'w-over' was not created" in message and f"max_collections = {CAP}" in message
    assert "memories" in message and "internal error" not in message  # where to store instead
    with pytest.raises(ToolCallError, match="max_collections"):
        server.call_tool("memory_store", {"content": "again", "collection": "w-over"}, agent="kite")
    # existing collections take writes as before, and the server's own private collection is made at the cap
    assert server.call_tool("memory_store", {"content": "more", "collection": made[0]}, agent="wren")["status"] == \
        "stored"
    assert server.call_tool("memory_bulk_store", {"chunks": [{"content": "my own turn"}], "collection": "sessions"},
                            agent="kite")["stored"] == 1
    assert collections(server) == {"memories", "sessions", *made}
    assert folders(server) == {"memories", "sessions", *made}


def test_a_restart_drops_collections_reads_made_before_and_keeps_every_written_one(tmp_path):
    home = tmp_path / "home"
    write_config(home, {"memory": {"max_collections": 3}})
    running = start_server(home, agents=("kite",))
    try:
        running.call_tool("memory_store", {"content": "kept: written once", "collection": "written"}, agent="kite")
        gone = running.call_tool("memory_bulk_store", {"chunks": [{"content": "stored, then deleted"}],
                                                       "collection": "emptied"}, agent="kite")["results"][0]["id"]
        running.call_tool("memory_delete", {"memory_id": gone, "collection": "emptied"}, agent="kite")
    finally:
        running.stop()
    # what a read made before this version: a folder with an empty log and the model record, nothing else
    for n in range(40):
        junk = home / "memory" / f"made-by-a-read-{n}"
        junk.mkdir()
        (junk / "records.log").write_bytes(b"")
        (junk / "model.json").write_bytes((home / "memory" / "written" / "model.json").read_bytes())
    tokens = running.tokens
    running = start_server(home, agents=())
    running.tokens = tokens
    try:
        assert collections(running) == {"memories", "written", "emptied"}
        assert "collection made-by-a-read-0 removed: it never held a memory" in running.log()
        found = running.call_tool("memory_search", {"query": "kept written once", "collection": "written",
                                                    "mode": "lexical"}, agent="kite")
        assert [r["content"] for r in found["results"]] == ["kept: written once"]
        with pytest.raises(ToolCallError, match="max_collections = 3"):  # the junk counted for nothing, these do
            running.call_tool("memory_store", {"content": "a fourth", "collection": "fourth"}, agent="kite")
    finally:
        running.stop()
    assert sorted(p.name for p in (home / "memory").iterdir() if p.name[0] != ".") == ["emptied", "memories",
                                                                                       "written"]
    # `persmem memory import` (the operator, server stopped) makes collections within the same cap
    records = tmp_path / "import.jsonl"
    records.write_text("".join(json.dumps({"content": f"imported {name}", "collection": name}) + "\n"
                               for name in ("written", "imported-a")))
    env = dict(running.env)
    done = subprocess.run(persmem_command("memory", "import", str(records)), env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1 and "collection 'imported-a' was not created" in done.stderr, done.stderr
    assert "written: imported 1" in done.stdout  # what fitted was stored, and a second run skips it
    assert not (home / "memory" / "imported-a").exists()


def test_the_cli_reads_make_no_collection_and_import_makes_them_within_the_cap(server, tmp_path):
    env = dict(server.env)
    stats = subprocess.run(persmem_command("memory", "stats", "--collection", "c-nothing"), env=env,
                           capture_output=True, text=True, timeout=120)
    assert stats.returncode == 1 and "no collection 'c-nothing'" in stats.stderr
    exported = tmp_path / "out.jsonl"
    done = subprocess.run(persmem_command("memory", "export", str(exported), "--collection", "c-nothing"), env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "no collection 'c-nothing'" in done.stderr
    assert "c-nothing" not in folders(server)


def test_on_a_cluster_the_cap_counts_what_the_stream_holds_and_nodes_open_what_another_made(cluster_nodes):
    """Every node counts the collections the memory stream holds (another node's too), and opens a collection
    another node made whatever its own count: the stream, not a node's cap, decides what exists."""
    group = cluster_nodes(config={"memory": {"max_collections": 2}})
    a, b = group.start(), group.start()
    a.call_tool("memory_store", {"content": "Runbooks live in the ops wiki.", "collection": "runbooks"}, agent="kite")
    with pytest.raises(ToolCallError, match="max_collections = 2"):  # memories here + runbooks on the stream
        b.call_tool("memory_store", {"content": "One too many.", "collection": "ops"}, agent="kite")
    deadline = time.monotonic() + 10
    while "runbooks" not in collections(b):
        assert time.monotonic() < deadline, "the collection made on a did not open on b"
        time.sleep(0.1)
    assert b.call_tool("memory_search", {"query": "where do runbooks live", "collection": "runbooks"},
                       agent="kite")["results"][0]["content"] == "Runbooks live in the ops wiki."
    with pytest.raises(ToolCallError, match="no collection 'probe'"):
        b.call_tool("memory_get", {"memory_id": "x", "collection": "probe"}, agent="kite")
    assert collections(a) == collections(b) == {"memories", "runbooks"}

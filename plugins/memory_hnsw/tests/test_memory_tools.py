"""The memory tools through a real server and a real MCP client: persMEM's names and arguments, and more."""

import json

import pytest

from persmem_core.sdk.testing import ToolCallError


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the module (model loading is the slow part); tests use their own projects."""
    from persmem_core.sdk.testing import start_server

    running = start_server(tmp_path_factory.mktemp("home"), agents=("kite", "wren"))
    yield running
    running.stop()


def call(server, tool, agent="kite", **args):
    return server.call_tool(tool, args, agent=agent)


def test_tools_are_listed_with_persmem_names_and_defaults(server):
    tools = {t.name: t.input_schema for t in server.list_tools(agent="kite")}
    assert {"memory_store", "memory_search", "memory_bulk_store", "memory_stats", "memory_list_collections",
            "chorus_init", "bootstrap_update", "memory_get", "memory_update", "memory_delete"} <= set(tools)
    store = tools["memory_store"]["properties"]
    assert store["project"]["default"] == "general" and store["tags"]["default"] == ""
    assert store["memory_type"]["default"] == "session_note" and store["collection"]["default"] == "memories"
    assert tools["memory_search"]["properties"]["top_k"]["default"] == 5
    assert "author" not in store and "call" not in store


def test_store_search_get_round_trip_with_author_from_credentials(server):
    stored = call(server, "memory_store", content="The billing service retries failed charges three times.",
                  project="rt", tags="billing,retries", memory_type="decision")
    assert stored["status"] == "stored"
    found = call(server, "memory_search", query="how often are failed payments retried", project="rt", agent="wren")
    top = found["results"][0]
    assert top["id"] == stored["id"] and top["author"] == "kite" and top["tags"] == ["billing", "retries"]
    assert top["type"] == "decision" and top["version"] == 1
    assert call(server, "memory_get", memory_id=stored["id"])["content"].startswith("The billing service")


def test_lexical_and_dense_both_find(server):
    call(server, "memory_store", content="Error ORA-12154 means the TNS alias could not be resolved.", project="hy")
    call(server, "memory_store", content="Our cat Miso likes to sleep on the warm laptop keyboard.", project="hy")
    exact = call(server, "memory_search", query="ORA-12154", project="hy", mode="lexical")
    assert "ORA-12154" in exact["results"][0]["content"]
    meaning = call(server, "memory_search", query="pet napping on a computer", project="hy", mode="dense")
    assert "Miso" in meaning["results"][0]["content"]
    hybrid = call(server, "memory_search", query="kitten sleeping on keyboard", project="hy")
    assert "Miso" in hybrid["results"][0]["content"]


def test_update_keeps_previous_version_and_delete_removes(server):
    stored = call(server, "memory_store", content="Deploys happen on Tuesdays.", project="upd")
    updated = call(server, "memory_update", memory_id=stored["id"], content="Deploys happen on Thursdays.")
    assert updated["version"] == 2 and updated["content"] == "Deploys happen on Thursdays."
    full = call(server, "memory_get", memory_id=stored["id"], include_history=True)
    assert full["history"][0]["content"] == "Deploys happen on Tuesdays." and full["history"][0]["version"] == 1
    results = call(server, "memory_search", query="which day are deploys", project="upd")["results"]
    assert [r["content"] for r in results] == ["Deploys happen on Thursdays."]
    tagged = call(server, "memory_update", memory_id=stored["id"], tags="ops")
    assert tagged["version"] == 3 and tagged["tags"] == ["ops"] and tagged["content"] == "Deploys happen on Thursdays."
    assert call(server, "memory_delete", memory_id=stored["id"])["status"] == "deleted"
    assert call(server, "memory_search", query="deploys", project="upd")["count"] == 0
    with pytest.raises(ToolCallError, match="no memory"):
        call(server, "memory_get", memory_id=stored["id"])


def test_filters_type_tags_author_and_time(server):
    call(server, "memory_store", content="Use PostgreSQL for the ledger.", project="flt", memory_type="decision",
         tags="db")
    call(server, "memory_store", content="PostgreSQL vacuum stalls on the ledger table.", project="flt",
         memory_type="bug", tags="db,perf", agent="wren")
    assert [r["type"] for r in call(server, "memory_search", query="postgres", project="flt",
                                    memory_type="bug")["results"]] == ["bug"]
    assert [r["author"] for r in call(server, "memory_search", query="postgres", project="flt",
                                      author="wren")["results"]] == ["wren"]
    assert call(server, "memory_search", query="postgres", project="flt", tags="perf")["count"] == 1
    assert call(server, "memory_search", query="postgres", project="flt", since="2999-01-01")["count"] == 0
    assert call(server, "memory_search", query="postgres", project="flt", until="2000-01-01")["count"] == 0
    days = sorted(r["created"][:10] for r in call(server, "memory_search", query="postgres", project="flt")["results"])
    assert call(server, "memory_search", query="postgres", project="flt", until=days[-1])["count"] == 2  # whole day
    assert call(server, "memory_search", query="postgres", project="flt", until=f"{days[0]}T00:00:00Z")["count"] == 0
    assert call(server, "memory_search", query="postgres", project="no-such-project")["count"] == 0


def test_dedup_returns_existing_id_and_never_deletes(server):
    first = call(server, "memory_store", content="The VPN config lives in /etc/wireguard/wg0.conf", project="dd")
    again = call(server, "memory_store", content="the VPN config lives in /etc/wireguard/wg0.conf ", project="dd")
    assert again == {"status": "duplicate", "id": first["id"], "match": "exact"}
    near = call(server, "memory_store", content="The VPN config lives in /etc/wireguard/wg0.conf!", project="dd")
    assert near["status"] == "duplicate" and near["id"] == first["id"]
    other_project = call(server, "memory_store", content="The VPN config lives in /etc/wireguard/wg0.conf", project="dd2")
    assert other_project["status"] == "stored"
    forced = call(server, "memory_store", content="The VPN config lives in /etc/wireguard/wg0.conf", project="dd",
                  dedup=False)
    assert forced["status"] == "stored"
    assert call(server, "memory_get", memory_id=first["id"])["id"] == first["id"]


def test_bulk_store_and_long_content_is_searchable_everywhere(server):
    filler = " ".join(f"word{i}" for i in range(1500))
    chunks = [{"content": f"Start marker zebracorn. {filler} End marker quokkafish.", "tags": "long"},
              {"content": "A short note about lunch.", "type": "note"}]
    result = call(server, "memory_bulk_store", chunks=json.dumps(chunks), project="bulk", context_chars=0)  # unrelated
    assert result["stored"] == 2
    long_id = result["results"][0]["id"]
    assert result["results"][0]["chunks"] > 1
    for word in ("zebracorn", "quokkafish"):
        assert call(server, "memory_search", query=word, project="bulk")["results"][0]["id"] == long_id
    end_dense = call(server, "memory_search", query="End marker quokkafish", project="bulk", mode="dense")
    assert end_dense["results"][0]["id"] == long_id
    with pytest.raises(ToolCallError, match="JSON"):
        call(server, "memory_bulk_store", chunks="[not json")
    with pytest.raises(ToolCallError, match="content"):
        call(server, "memory_bulk_store", chunks=json.dumps([{"text": "no content key"}]))


def test_bulk_store_indexes_each_chunk_with_its_neighbours(server):
    turns = [{"content": "Caroline asked: what did you paint for the harbour exhibition?", "id": "talk-1"},
             {"content": "Melanie said: a sunrise over the lake, in oils.", "id": "talk-2"},
             {"content": "Caroline said: I adopted a grey kitten called Pepper.", "id": "talk-3"}]
    call(server, "memory_bulk_store", chunks=json.dumps(turns), project="ctx")
    alone = [dict(t, id=t["id"] + "-alone") for t in turns]
    call(server, "memory_bulk_store", chunks=json.dumps(alone), project="ctx-off", context_chars=0)

    found = [r["id"] for r in call(server, "memory_search", query="harbour exhibition", project="ctx",
                                   mode="lexical")["results"]]
    assert found[:2] == ["talk-2", "talk-1"]  # the answer is found by the question's words, ranked above it
    assert "talk-3" in found  # its context holds the end of talk-2 (300 characters each side by default)
    off = [r["id"] for r in call(server, "memory_search", query="harbour exhibition", project="ctx-off",
                                 mode="lexical")["results"]]
    assert off == ["talk-1-alone"]
    answer = call(server, "memory_get", memory_id="talk-2")
    assert answer["content"] == "Melanie said: a sunrise over the lake, in oils." and "context" not in answer
    mixed = [dict(t, id=t["id"] + "-mixed", project=f"ctx-{i}") for i, t in enumerate(turns)]
    call(server, "memory_bulk_store", chunks=json.dumps(mixed))
    other = call(server, "memory_search", query="harbour exhibition", project="ctx-1", mode="lexical")["results"]
    assert other == []  # a neighbour in another project is not context
    with pytest.raises(ToolCallError, match="context_chars must be 0-2000"):
        call(server, "memory_bulk_store", chunks=json.dumps(turns), context_chars=5000)


def test_collections_and_stats(server):
    call(server, "memory_store", content="A memory in its own collection.", collection="scratch", project="col")
    names = {c["name"]: c["count"] for c in call(server, "memory_list_collections")["collections"]}
    assert names["scratch"] == 1 and "memories" in names
    stats = call(server, "memory_stats", collection="scratch")
    assert stats["count"] == 1 and stats["projects"] == {"col": 1}
    with pytest.raises(ToolCallError, match="invalid collection"):
        call(server, "memory_store", content="x", collection="../../etc")


def test_chorus_init_and_bootstrap_update(server):
    made = call(server, "bootstrap_update", entry_id="kite-identity", content="I am Kite, the reviewer.")
    assert made["id"] == "kite-identity"
    call(server, "bootstrap_update", entry_id="kite-identity", content="I am Kite, reviewer and tester.")
    call(server, "bootstrap_update", entry_id="wren-identity", content="I am Wren.", agent="wren")
    for i in range(4):
        call(server, "memory_store", content=f"Handoff {i}: state of the migration, step {i}.", project="boot",
             memory_type="handoff")
    boot = call(server, "chorus_init", project="boot")
    assert boot["agent"] == "kite"
    assert [p["content"] for p in boot["pinned"]] == ["I am Kite, reviewer and tester."]
    assert [h["content"][:9] for h in boot["handoffs"]] == ["Handoff 3", "Handoff 2", "Handoff 1"]
    assert call(server, "memory_get", memory_id="kite-identity", include_history=True)["history"][0]["content"] == (
        "I am Kite, the reviewer.")
    with pytest.raises(ToolCallError, match="authenticated as 'kite'"):
        server.call_tool("chorus_init", {"agent": "wren"}, agent="kite")


def test_bad_arguments_get_clear_errors(server):
    with pytest.raises(ToolCallError, match="top_k"):
        call(server, "memory_search", query="x", top_k=500)
    with pytest.raises(ToolCallError, match="empty"):
        call(server, "memory_store", content="   ")
    with pytest.raises(ToolCallError, match="since"):
        call(server, "memory_search", query="x", since="last tuesday")
    with pytest.raises(ToolCallError, match="invalid memory id"):
        call(server, "memory_store", content="x", memory_id="../evil")
    with pytest.raises(ToolCallError, match="limit"):
        call(server, "memory_store", content="x" * 300_000)
    assert call(server, "persmem_whoami")["agent"] == "kite"

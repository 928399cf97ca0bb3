"""The memory tools' arguments as an AI sends them, through a real server and a real MCP client: tags as a list or
a comma-separated string wherever tags are taken, a chat imported by memory_bulk_store (one call is one
conversation: a repeated line is kept once, nothing is merged with an earlier conversation), and a query far longer
than what is searched (it is cut, and the reply says so); and what a connection lists by default."""

import json

import anyio

from persmem_core.sdk.testing import ToolCallError, clean_env, start_server
from persmem_memory_hnsw.tools.searching import SEARCHED_QUERY_CHARS


def call(server, tool: str, agent: str = "kite", **args):
    return server.call_tool(tool, args, agent=agent)


def raw_call(server, tool: str, args: dict, agent: str = "kite") -> tuple[str, dict]:
    """The text the caller reads (the MCP text block) and its JSON."""

    async def run():
        async with server.client(agent) as client:
            return await client.call_tool(tool, args)

    result = anyio.run(run)
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    if result.is_error:
        raise ToolCallError(text)
    return text, json.loads(text)


# -- tags: a list or "a,b", everywhere -------------------------------------------------------------------------

def test_tags_as_a_list_or_a_string_in_store_update_search_bulk_and_bootstrap(shared_server):
    project = "tags-both"
    listed = call(shared_server, "memory_store", content="The nightly backup runs at 02:00 UTC.", project=project,
                  tags=["ops", "backup", " ops "])
    joined = call(shared_server, "memory_store", content="The staging cluster has three nodes.", project=project,
                  tags="ops, staging")
    assert call(shared_server, "memory_get", memory_id=listed["id"])["tags"] == ["ops", "backup"]
    assert call(shared_server, "memory_get", memory_id=joined["id"])["tags"] == ["ops", "staging"]

    updated = call(shared_server, "memory_update", memory_id=joined["id"], tags=["staging", "k8s"])
    assert updated["tags"] == ["staging", "k8s"]

    by_list = call(shared_server, "memory_search", query="backup schedule", project=project, tags=["backup"])
    by_text = call(shared_server, "memory_search", query="backup schedule", project=project, tags="backup")
    assert [r["id"] for r in by_list["results"]] == [r["id"] for r in by_text["results"]] == [listed["id"]]

    bulk = call(shared_server, "memory_bulk_store", project=project, context_chars=0,
                chunks=[{"content": "Deploys freeze on Fridays.", "tags": ["release"]},
                        {"content": "Hotfixes need two reviewers.", "tags": "release,review"}])
    tags = [call(shared_server, "memory_get", memory_id=r["id"])["tags"] for r in bulk["results"]]
    assert tags == [["release"], ["release", "review"]]

    entry = call(shared_server, "bootstrap_update", entry_id="kite-tags-entry", content="I am Kite, I keep ops notes.",
                 tags=["identity", "ops"])
    assert call(shared_server, "memory_get", memory_id=entry["id"])["tags"] == ["identity", "ops"]


def test_tags_that_are_neither_refused_naming_the_forms(shared_server):
    for bad in ([1, 2], {"a": "b"}):
        try:
            call(shared_server, "memory_store", content="Tags of the wrong kind.", project="tags-bad", tags=bad)
        except ToolCallError as exc:
            assert "tags" in str(exc)
        else:
            raise AssertionError(f"tags={bad!r} was accepted")


# -- a chat imported by memory_bulk_store ----------------------------------------------------------------------

def test_a_conversation_keeps_its_repeated_lines_once_and_is_not_merged_with_an_earlier_one(shared_server):
    project = "chat-import"
    first = call(shared_server, "memory_bulk_store", project=project, chunks=[
        {"content": "Did you fix the flaky login test?", "created": "2026-03-02T10:00:00Z"},
        {"content": "ok", "created": "2026-03-02T10:01:00Z"},
        {"content": "It was a race in the session cookie refresh.", "created": "2026-03-02T10:02:00Z"},
        {"content": "ok", "created": "2026-03-02T10:03:00Z"},
    ])
    results = first["results"]
    assert first["stored"] == 3 and [r["status"] for r in results] == ["stored", "stored", "stored", "duplicate"]
    assert results[3]["id"] == results[1]["id"] and results[3]["match"] == "exact"

    # Another conversation that says "ok" again, and a line close to (not the same as) one stored before: both
    # are this conversation's own turns, stored.
    second = call(shared_server, "memory_bulk_store", project=project, chunks=[
        {"content": "ok"}, {"content": "It was a race in the session cookie refresh!"}])
    assert [r["status"] for r in second["results"]] == ["stored", "stored"]
    assert second["results"][0]["id"] != results[1]["id"]

    undeduplicated = call(shared_server, "memory_bulk_store", project=project, dedup=False,
                          chunks=[{"content": "same"}, {"content": "same"}])
    assert undeduplicated["stored"] == 2


def test_a_bulk_store_over_the_chunk_limit_says_to_split_it(shared_server):
    chunks = [{"content": f"line {i}"} for i in range(1001)]
    try:
        call(shared_server, "memory_bulk_store", project="chat-import", chunks=chunks)
    except ToolCallError as exc:
        assert "at most 1000 per call" in str(exc)
    else:
        raise AssertionError("1001 chunks were accepted")


def test_the_bulk_store_description_says_what_a_chat_import_needs(shared_server):
    tool = {t.name: t for t in shared_server.list_tools(agent="kite")}["memory_bulk_store"]
    text = " ".join(tool.description.split())
    for said in ("1000", "One call is one conversation", "context_chars=0", "word for word"):
        assert said in text, said


# -- a very long query -----------------------------------------------------------------------------------------

def test_a_40k_character_query_is_cut_and_the_reply_says_so(shared_server):
    call(shared_server, "memory_store", content="The invoice exporter writes CSV files to the billing bucket.",
         project="long-query", dedup=False)
    # What is asked comes first; a pasted log follows (tens of thousands of characters of other words).
    query = "where does the invoice exporter write its CSV files? " + " ".join(
        f"trace{i} frame{i % 97} handler{i % 13}" for i in range(2500))
    assert len(query) > 40_000
    text, reply = raw_call(shared_server, "memory_search", {"query": query, "project": "long-query"})
    assert f"first {SEARCHED_QUERY_CHARS} characters of the query" in reply["note"]
    assert f"({len(query)} characters)" in reply["query"] and len(reply["query"]) < 300
    assert reply["results"][0]["content"].startswith("The invoice exporter")
    tool = {t.name: t for t in shared_server.list_tools(agent="kite")}["memory_search"]
    assert f"first {SEARCHED_QUERY_CHARS} characters" in tool.description


def test_a_long_query_is_embedded_from_its_first_window_only(shared_server):
    """Whatever follows the embedder's first window changes nothing of the query's meaning (one model run)."""
    project = "long-query-dense"
    call(shared_server, "memory_store", content="Backups are encrypted with age before upload.", project=project,
         dedup=False)
    start = "how are the backups encrypted " + " ".join(str(i % 10) for i in range(380))  # > 256 tokens
    assert len(start) < 900
    replies = [call(shared_server, "memory_search", query=start + tail, project=project, mode="dense", verbose=True)
               for tail in (" tail one", " another tail, quite different words")]
    assert replies[0]["results"][0]["distance"] == replies[1]["results"][0]["distance"]


# -- what a connection lists by default ------------------------------------------------------------------------

def test_the_default_sets_list_the_memory_tools_but_not_curation(tmp_path):
    home = tmp_path / "home"
    env = clean_env(home, PERSMEM_DEFAULT_TOOL_SETS="memory,sessions,mail")  # the run's "all" left out
    server = start_server(home, agents=("kite",), env=env)
    try:
        listed = {t.name for t in server.list_tools(agent="kite")}
        assert {"memory_store", "memory_bulk_store", "memory_search", "memory_get", "memory_update", "memory_delete",
                "memory_validate", "memory_unlink", "persmem_whoami"} <= listed
        assert not listed & {"memory_consolidate", "memory_stats", "memory_list_collections", "chorus_init"}
        try:
            server.call_tool("memory_stats", {}, agent="kite")
        except ToolCallError as exc:
            assert "'curation'" in str(exc) and "--add curation" in str(exc)
        else:
            raise AssertionError("memory_stats was served outside the agent's sets")
    finally:
        server.stop()

"""memory_search (and chorus_init) replies sized for an AI caller, and the tool contract around them, through a
real server and a real MCP client (issue 15). Grouped by what they refuse: oversized replies, internals in
replies, silent empty results for names that do not exist, contradictory arguments."""

import json
import time

import anyio
import pytest

from persmem_core.sdk.testing import ToolCallError

BUDGET = 10_000  # [memory] search_reply_chars default


def raw_call(server, tool: str, args: dict, agent: str = "kite") -> tuple[str, dict]:
    """The text the caller reads (the MCP text block) and its JSON."""

    async def call():
        async with server.client(agent) as client:
            return await client.call_tool(tool, args)

    result = anyio.run(call)
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    if result.is_error:
        raise ToolCallError(text)
    return text, json.loads(text)


def embedded(server, timeout: float = 60.0) -> None:
    """Wait until every memory stored so far has its vector (memory_stats counts those still waiting)."""
    deadline = time.monotonic() + timeout
    while server.call_tool("memory_stats", {}, agent="kite")["not_embedded_yet"]:
        assert time.monotonic() < deadline, "the background embedder did not catch up"
        time.sleep(0.05)


def store(server, content: str, project: str, agent: str = "kite", **extra) -> str:
    args = {"content": content, "project": project, "dedup": False, **extra}
    return server.call_tool("memory_store", args, agent=agent)["id"]


# -- oversized replies --------------------------------------------------------------------------------------

def test_a_1mb_query_is_not_echoed_back(shared_server):
    store(shared_server, "The release train leaves every second Tuesday.", "echo")
    query = "release train schedule " * 45_000  # ~1 MB
    text, reply = raw_call(shared_server, "memory_search", {"query": query, "project": "echo"})
    assert len(text) < BUDGET, len(text)
    assert len(reply["query"]) < 300 and f"({len(query)} characters)" in reply["query"]
    assert "first 1000 characters of the query" in reply["note"]
    assert reply["results"][0]["content"] == "The release train leaves every second Tuesday."


@pytest.mark.parametrize("name, value", [("project", "infra" * 200_000), ("collection", "notes" * 200_000),
                                         ("memory_type", "x" * 1_000_000), ("mode", "y" * 1_000_000),
                                         ("since", "2026" * 250_000)])
def test_a_1mb_argument_is_not_echoed_back(shared_server, name, value):
    async def call():
        async with shared_server.client("kite") as client:
            return await client.call_tool("memory_search", {"query": "load balancers", name: value})

    result = anyio.run(call)
    text = "\n".join(getattr(block, "text", "") for block in result.content)
    assert len(text) < 2000, (name, len(text), result.is_error)


def test_a_hit_on_a_200k_memory_is_its_matching_passage_within_the_budget(shared_server):
    # A fixed-width log: lines padded with spaces to 1000 characters, so the model embeds ~2,000 tokens rather
    # than ~45,000 (minutes on two shared cores); the reply sees 199,000 characters all the same.
    lines = [f"{f'routine log line {i}, nothing to see here.':<999}\n" for i in range(199)]
    passage = "The backup vault passphrase rotates on the first Monday of each quarter."
    lines[120] = f"{passage:<999}\n"
    content = "".join(lines)
    assert len(content) == 199_000
    long_id = store(shared_server, content, "huge")
    store(shared_server, "A short note about the vault door hinge.", "huge")
    text, reply = raw_call(shared_server, "memory_search",
                           {"query": "when does the vault passphrase rotate", "project": "huge", "top_k": 5})
    assert len(text) < BUDGET, len(text)
    hit = next(r for r in reply["results"] if r["id"] == long_id)
    assert passage in hit["content"] and hit["truncated"] is True and hit["full_chars"] == len(content)
    start, end = hit["shown_chars"]
    assert content[start:end] in hit["content"] and end - start <= 1500
    assert "memory_get" in reply["note"]
    whole = shared_server.call_tool("memory_get", {"memory_id": long_id}, agent="kite")
    assert whole["content"] == content


def test_a_long_memory_without_the_query_words_shows_its_start(shared_server):
    content = "Opening words of a long design document. " + "lorem ipsum dolor sit amet " * 400
    memory_id = store(shared_server, content, "start-shown")
    _, reply = raw_call(shared_server, "memory_search", {"query": "xyzzy plugh", "project": "start-shown",
                                                          "mode": "dense"})
    hit = reply["results"][0]
    assert hit["id"] == memory_id and hit["truncated"] and hit["shown_chars"][0] == 0
    assert hit["content"].startswith("Opening words of a long design document.")


def test_many_long_hits_are_cut_to_the_budget_and_the_reply_says_so(shared_server):
    chunks = [{"content": f"Kiln firing report {i}: cone six glaze firing notes. " + "glaze kiln cone " * 60}
              for i in range(20)]
    shared_server.call_tool("memory_bulk_store", {"chunks": chunks, "project": "kilns", "dedup": False,
                                                  "context_chars": 0}, agent="kite")
    text, reply = raw_call(shared_server, "memory_search", {"query": "kiln glaze cone firing", "project": "kilns",
                                                             "top_k": 20, "mode": "lexical"})
    assert len(text) < BUDGET, len(text)
    assert 1 <= reply["count"] == len(reply["results"]) < 20
    assert all(r["truncated"] and len(r["content"]) <= 202 for r in reply["results"])  # 200 and two "…"
    left = 20 - reply["count"]
    assert f"{left} more matching memories left out to keep this reply under {BUDGET} characters" in reply["note"]


def test_tail_hits_far_below_the_best_are_left_out(shared_server):
    store(shared_server, "Quarterly penguin census: 412 emperor penguins counted on the ice shelf.", "census")
    for i in range(8):
        store(shared_server, f"Unrelated reminder {i}: water the office ferns on Fridays.", "census")
    embedded(shared_server)  # the floor is about fused scores: every memory of the shared store has its vector
    _, reply = raw_call(shared_server, "memory_search", {"query": "emperor penguin census count", "project": "census",
                                                          "top_k": 10, "verbose": True})
    scores = [r["score"] for r in reply["results"]]
    assert "penguin" in reply["results"][0]["content"]
    assert min(scores) >= 0.2 * scores[0] and 0.0 not in scores
    assert reply["below_score_floor"] > 0 and reply["count"] < 9


# -- internals in replies -----------------------------------------------------------------------------------

def test_search_hits_carry_no_internals_unless_verbose(shared_server):
    store(shared_server, "The staging database is refreshed from production every night.", "internals")
    _, plain = raw_call(shared_server, "memory_search", {"query": "staging database refresh", "project": "internals"})
    hit = plain["results"][0]
    assert set(hit) == {"id", "score", "content", "project", "type", "tags", "author", "created", "updated",
                        "version"}
    assert "took_ms" not in plain
    _, verbose = raw_call(shared_server, "memory_search", {"query": "staging database refresh",
                                                            "project": "internals", "verbose": True})
    assert {"content_hash", "distance", "lexical_score", "editor"} <= set(verbose["results"][0])
    assert "took_ms" in verbose
    got = shared_server.call_tool("memory_get", {"memory_id": hit["id"]}, agent="kite")
    assert "content_hash" not in got


def test_chorus_init_shows_a_long_handoff_by_its_start(shared_server):
    long = "Handoff: the migration is half done. " + "step details " * 1000
    memory_id = store(shared_server, long, "long-handoff", memory_type="handoff")
    text, boot = raw_call(shared_server, "chorus_init", {"project": "long-handoff"})
    assert len(text) < BUDGET, len(text)
    handoff = boot["handoffs"][0]
    assert handoff["id"] == memory_id and handoff["truncated"] and handoff["full_chars"] == len(long)
    assert handoff["content"].startswith("Handoff: the migration is half done.") and "memory_get" in boot["note"]


# -- silent empty results for names that do not exist -------------------------------------------------------

def test_a_misspelt_project_answers_with_the_closest_existing_one(shared_server):
    store(shared_server, "The infra team owns the load balancers.", "infra")
    _, reply = raw_call(shared_server, "memory_search", {"query": "load balancers", "project": "infr"})
    assert reply["count"] == 0 and "'infra'" in reply["hint"] and "did you mean" in reply["hint"]
    stats = shared_server.call_tool("memory_stats", {"project": "infr"}, agent="kite")
    assert stats["count"] == 0 and "'infra'" in stats["hint"]


def test_a_misspelt_collection_and_type_answer_with_the_closest_existing_ones(shared_server):
    shared_server.call_tool("memory_store", {"content": "A runbook for the mail relay.", "collection": "runbooks",
                                             "memory_type": "procedure", "project": "relay"}, agent="kite")
    _, reply = raw_call(shared_server, "memory_search", {"query": "mail relay", "collection": "runbook"})
    assert reply["count"] == 0 and "'runbooks'" in reply["hint"]
    assert "'runbooks'" in shared_server.call_tool("memory_stats", {"collection": "runbok"}, agent="kite")["hint"]
    _, typed = raw_call(shared_server, "memory_search", {"query": "mail relay", "collection": "runbooks",
                                                          "memory_type": "procedures"})
    assert typed["count"] == 0 and "'procedure'" in typed["hint"]


def test_names_that_exist_but_match_nothing_together_get_no_hint(shared_server):
    store(shared_server, "The infra budget review is in March.", "infra")
    _, reply = raw_call(shared_server, "memory_search", {"query": "budget", "project": "infra",
                                                          "since": "2999-01-01"})
    assert reply["count"] == 0 and "hint" not in reply


# -- contradictory arguments and defaults -------------------------------------------------------------------

def test_since_after_until_is_refused_naming_both(shared_server):
    with pytest.raises(ToolCallError, match=r"since \(2026-05-01\) is after until \(2026-04-01\)"):
        shared_server.call_tool("memory_search", {"query": "x", "since": "2026-05-01", "until": "2026-04-01"},
                                agent="kite")
    same_day = shared_server.call_tool("memory_search", {"query": "x", "since": "2026-04-01", "until": "2026-04-01"},
                                       agent="kite")
    assert same_day["count"] == 0  # one whole day is a valid range


def test_every_memory_tool_defaults_to_project_general(shared_server):
    tools = {t.name: t.input_schema["properties"] for t in shared_server.list_tools(agent="kite")}
    # The memory tools' project is where a memory goes or is looked for; other plugins' tools may filter by project
    # with "" meaning any (session_list), which is not a second default project.
    memory_tools = {name for name in tools if name.startswith(("memory_", "bootstrap_", "chorus_"))}
    defaults = {name: props["project"].get("default") for name, props in tools.items()
                if "project" in props and name in memory_tools}
    assert defaults["bootstrap_update"] == "general" and defaults["chorus_init"] == "general"
    assert {d for d in defaults.values() if d not in (None, "")} == {"general"}, defaults  # "": a filter, any
    made = shared_server.call_tool("bootstrap_update", {"entry_id": "kite-defaults", "content": "I am Kite."},
                                   agent="kite")
    assert shared_server.call_tool("memory_get", {"memory_id": made["id"]}, agent="kite")["project"] == "general"

"""The later statement wins at query time (lifecycle.restated), through a real server and a real MCP client:
among a search's best results, an older memory yields to a later one of the same project and author that says
much the same and answers the query nearly as well; it is marked restated_by and nothing is linked, hidden or
deleted. A still-true older memory asked about in its own words keeps its place, and the memories of one store
call (one conversation) never outrank each other by this rule."""

from __future__ import annotations

import json

OLD = "The Zephyr staging environment runs on a PostgreSQL 14 database hosted on db-stage-01."
NEW = "We moved Zephyr staging off PostgreSQL: its database is SQLite now, a single file on the app server."
QUESTION = "Which database does Zephyr staging use?"
OTHERS = ["Zephyr production runs three replicas behind a load balancer.",
          "The Zephyr mobile app ships a release every other Tuesday.",
          "Zephyr invoices are rendered as PDF files with WeasyPrint."]


def call(server, tool, agent="kite", **args):
    return server.call_tool(tool, args, agent=agent)


def bulk(server, project: str, texts: list[str], agent="kite") -> list[str]:
    reply = call(server, "memory_bulk_store", agent=agent, chunks=json.dumps([{"content": t, "project": project}
                                                                               for t in texts]), context_chars=0)
    return [r["id"] for r in reply["results"]]


def search(server, query: str, project: str, agent="kite") -> list[dict]:
    return call(server, "memory_search", agent=agent, query=query, project=project, top_k=10)


def test_a_restatement_in_other_words_ranks_first_and_the_old_one_is_marked(shared_server):
    project = "rs-restated"
    bulk(shared_server, project, OTHERS)
    # memory_bulk_store detects no supersession: only the query-time rule can rank the restatement first
    [old] = bulk(shared_server, project, [OLD])
    before = search(shared_server, QUESTION, project)
    assert [r["id"] for r in before["results"]][0] == old
    [new] = bulk(shared_server, project, [NEW])
    reply = search(shared_server, QUESTION, project)
    ranked = [r["id"] for r in reply["results"]]
    assert ranked[:2] == [new, old]
    marked = {r["id"]: r for r in reply["results"]}
    assert marked[old]["restated_by"] == new and "superseded_by" not in marked[old]
    assert "restated_by" not in marked[new]
    assert "much the same" in reply["note"] and reply["note"].count("restated_by") == 1
    # a bounded swap, not a burial: the old one sits just below the new one
    assert marked[old]["score"] >= 0.95 * marked[new]["score"]
    # nothing is linked or hidden: the old memory is whole, current, and found without the rule's options
    assert call(shared_server, "memory_get", memory_id=old)["superseded_by"] is None
    hidden = call(shared_server, "memory_search", query=QUESTION, project=project, include_superseded=False)
    assert old in [r["id"] for r in hidden["results"]]


def test_a_still_true_older_twin_asked_about_specifically_stays_first(shared_server):
    project = "rs-twins"
    [older] = bulk(shared_server, project, ["Incident 412: the search API was down for 20 minutes because of an "
                                            "expired token."])
    bulk(shared_server, project, ["Incident 413: the search API was down for 35 minutes because of a "
                                            "full disk on a worker."])
    reply = search(shared_server, "What happened in incident 412 with the expired token?", project)
    first = reply["results"][0]
    assert first["id"] == older and "restated_by" not in first  # the later twin answers this question worse


def test_one_store_call_never_restates_itself(shared_server):
    project = "rs-one-call"
    old, new = bulk(shared_server, project, [OLD, NEW])  # one conversation: one created time
    reply = search(shared_server, QUESTION, project)
    assert all("restated_by" not in r for r in reply["results"])
    assert {r["id"] for r in reply["results"][:2]} == {old, new}


def test_another_agents_later_statement_does_not_outrank_mine(shared_server):
    project = "rs-authors"
    [mine] = bulk(shared_server, project, [OLD])
    bulk(shared_server, project, [NEW], agent="wren")
    reply = search(shared_server, QUESTION, project)
    assert reply["results"][0]["id"] == mine and "restated_by" not in reply["results"][0]


def test_an_undone_link_is_not_made_again_at_query_time(shared_server):
    """memory_unlink says the later memory does not restate the older one: the query-time rule then leaves
    that pair to the query (the old one is first again, unmarked)."""
    project = "rs-unlinked"
    bulk(shared_server, project, OTHERS)
    [old] = bulk(shared_server, project, [OLD])
    new = call(shared_server, "memory_store", content=NEW, project=project, supersedes=old)["id"]
    linked = search(shared_server, QUESTION, project)
    assert [r["id"] for r in linked["results"]][:2] == [new, old]
    call(shared_server, "memory_unlink", memory_id=new, supersedes_id=old)
    reply = search(shared_server, QUESTION, project)
    assert [r["id"] for r in reply["results"]][0] == old
    assert all("restated_by" not in r and "superseded_by" not in r for r in reply["results"])
    # linking it again (a new memory saying so) is honoured: only that pair's undoing is remembered
    newer = call(shared_server, "memory_store", content=NEW + " Confirmed in the 2026 review.", project=project,
                 supersedes=old)["id"]
    assert [r["id"] for r in search(shared_server, QUESTION, project)["results"]][0] == newer

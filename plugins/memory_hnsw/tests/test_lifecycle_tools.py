"""The lifecycle's MCP tools and replies through a real server and a real MCP client (issue 17): a restated fact
is linked to the one it replaces and wins the ranking, the old one stays readable and says so, a wrong link is
undone; feedback moves a memory a bounded step; expired memories hide and due ones are marked; consolidation
plans, writes and is idempotent. Nothing is ever deleted."""

from __future__ import annotations

import json
import time

import anyio
import pytest

from persmem_core.sdk.testing import ToolCallError

OLD_FACT = "The staging environment uses PostgreSQL 15 as its database."
NEW_FACT = "The staging environment now uses SQLite as its database instead of PostgreSQL."
UNRELATED = ["The billing service retries failed charges three times before paging on-call.",
             "Our TLS certificates renew through certbot on the edge proxy every 60 days.",
             "The design system's primary color is #1F6FEB and buttons have 6px rounded corners.",
             "Grafana dashboards for the API live in the ops repo under dashboards/api.json."]


def call(server, tool, agent="kite", **args):
    return server.call_tool(tool, args, agent=agent)


def by_id(reply: dict) -> dict[str, dict]:
    return {item["id"]: item for item in reply["results"]}


def links_made(server, memory_id: str, agent="kite") -> list[dict]:
    """The links a stored memory made, as memory_get shows them once it is embedded (a restatement is detected
    then, after the store was acknowledged; memory_get waits for that): [{"target", "how", "detail"}]."""
    memory = call(server, "memory_get", agent=agent, memory_id=memory_id, include_history=True)
    return [{"target": c["target"], "how": c["how"], "detail": c["detail"]} for c in memory["link_history"]
            if c["action"] == "linked" and c["target"] in memory["supersedes"]]


def ids(reply: dict) -> list[str]:
    return [item["id"] for item in reply["results"]]


# -- supersession: detected, shown, readable, undone ----------------------------------------------------------

def test_a_restated_fact_is_linked_ranked_first_marked_and_the_link_can_be_undone(shared_server):
    project = "lc-restate"
    for text in UNRELATED:
        call(shared_server, "memory_store", content=text, project=project)
    old = call(shared_server, "memory_store", content=OLD_FACT, project=project, tags="staging,db")["id"]
    stored = call(shared_server, "memory_store", content=NEW_FACT, project=project, tags="staging")
    new = stored["id"]
    # memory_store embeds before it answers: the detected link is in its reply, with how to undo it
    assert [(s["id"], s["how"]) for s in stored["supersedes"]] == [(old, "detected")]
    assert "memory_unlink" in stored["note"]
    [link] = links_made(shared_server, new)
    assert link["target"] == old and link["how"] == "detected"
    similarity, terms = link["detail"].split("; shared terms: ")
    assert float(similarity.removeprefix("similarity ")) >= 0.7 and len(terms.split(", ")) >= 2

    question = "which database does the staging environment use"
    found = call(shared_server, "memory_search", query=question, project=project, agent="wren")
    assert ids(found)[:2] == [new, old]  # the current statement first, even for another agent
    assert by_id(found)[old]["superseded_by"] == new and by_id(found)[new]["supersedes"] == [old]
    assert "superseded_by" not in by_id(found)[new] and "prefer its successor" in found["note"]
    superseded_score = by_id(found)[old]["score"]
    hidden = call(shared_server, "memory_search", query=question, project=project, include_superseded=False)
    assert new in ids(hidden) and old not in ids(hidden)

    old_view = call(shared_server, "memory_get", memory_id=old, include_history=True)
    assert old_view["content"] == OLD_FACT and old_view["version"] == 1  # readable, whole, unchanged
    assert old_view["superseded_by"] == new and old_view["chain"] == [old, new]
    new_view = call(shared_server, "memory_get", memory_id=new, include_history=True)
    assert new_view["supersedes"] == [old] and new_view["superseded_by"] is None
    [linked] = new_view["link_history"]
    assert (linked["action"], linked["target"], linked["by"], linked["how"]) == ("linked", old, "kite", "detected")
    assert new_view["version"] == 1  # a link is no new version of the text

    with pytest.raises(ToolCallError, match="may .*only memories you wrote|grant"):
        call(shared_server, "memory_unlink", memory_id=new, agent="wren")  # not wren's to undo
    undone = call(shared_server, "memory_unlink", memory_id=new)
    assert undone["unlinked"] == [old] and undone["supersedes"] == []
    after = call(shared_server, "memory_search", query=question, project=project)
    assert "superseded_by" not in by_id(after)[old] and "supersedes" not in by_id(after)[new]
    assert 1.7 < by_id(after)[old]["score"] / superseded_score < 2.3  # x 1 / superseded_weight (0.5): as before
    assert call(shared_server, "memory_get", memory_id=old)["superseded_by"] is None
    history = call(shared_server, "memory_get", memory_id=new, include_history=True)["link_history"]
    assert [(c["action"], c["by"]) for c in history] == [("linked", "kite"), ("unlinked", "kite")]
    assert call(shared_server, "memory_stats", project=project)["count"] == len(UNRELATED) + 2  # nothing deleted


def test_the_older_side_can_be_unlinked_and_a_restatement_by_another_agent_is_not_linked(shared_server):
    project = "lc-sides"
    old = call(shared_server, "memory_store", content="The team standup is at 9:30 every weekday.",
               project=project)["id"]
    by_wren = call(shared_server, "memory_store", content="The team standup moved to 10:00 every weekday.",
                   project=project, agent="wren")
    assert not links_made(shared_server, by_wren["id"], agent="wren")  # wren may not change kite's memory
    mine = call(shared_server, "memory_store", content="The team standup moved to 10:15 every weekday.",
                project=project)
    assert [link["target"] for link in links_made(shared_server, mine["id"])] == [old]
    undone = call(shared_server, "memory_unlink", memory_id=old)  # from the older side
    assert undone == {"status": "unlinked", "id": mine["id"], "unlinked": [old], "supersedes": []}
    with pytest.raises(ToolCallError, match=old):
        call(shared_server, "memory_unlink", memory_id=old)  # nothing left to undo: said, naming it


def test_over_stdio_a_restatement_is_linked_and_unlinked_the_same_way(persmem_stdio):
    async def session():
        async with persmem_stdio(agent="kite") as client:
            async def use(tool, **args):
                result = await client.call_tool(tool, args)
                assert not result.is_error, result.content
                return json.loads(result.content[0].text)

            old = (await use("memory_store", content=OLD_FACT, project="lc-stdio"))["id"]
            new = await use("memory_store", content=NEW_FACT, project="lc-stdio")
            new.update(await use("memory_get", memory_id=new["id"]))  # waits for its embedding (and detection)
            found = await use("memory_search", query="staging database", project="lc-stdio")
            undone = await use("memory_unlink", memory_id=old)
            handoffs = [await use("memory_store", project="lc-stdio", memory_type="handoff", content=text, **extra)
                        for text, extra in (("Handoff: the SQLite move is done.", {}),
                                            ("Handoff: a stale note.", {"valid_until": "2020-01-01"}))]
            boot = await use("chorus_init", project="lc-stdio")
            return old, new, found, undone, handoffs, boot

    old, new, found, undone, handoffs, boot = anyio.run(session)
    assert new["supersedes"] == [old] and by_id(found)[old]["superseded_by"] == new["id"]
    assert undone["unlinked"] == [old]
    assert [h["id"] for h in boot["handoffs"]] == [handoffs[0]["id"]]  # the expired one is left out


def test_explicit_supersedes_links_and_bad_targets_are_refused_naming_them(shared_server):
    project = "lc-explicit"
    first = call(shared_server, "memory_store", content="Lunch orders go to the kitchen by 11:00.",
                 project=project)["id"]
    second = call(shared_server, "memory_store", content="Parking permits are renewed in January.",
                  project=project)["id"]
    both = call(shared_server, "memory_store", content="Office logistics now live in the facilities wiki.",
                project=project, supersedes=f"{first}, {second}")
    assert [(link["id"], link["how"]) for link in both["supersedes"]] == [(first, "explicit"), (second, "explicit")]
    listed = call(shared_server, "memory_store", content="Office logistics moved again, to the handbook.",
                  project=project, supersedes=[both["id"]])
    assert [link["id"] for link in listed["supersedes"]] == [both["id"]]
    assert call(shared_server, "memory_get", memory_id=first)["chain"] == [first, both["id"], listed["id"]]
    again = call(shared_server, "memory_store", content="Office logistics moved again, to the handbook.",
                 project=project, supersedes=first)
    assert again["status"] == "duplicate" and "no supersedes link was made" in again["note"]

    elsewhere = call(shared_server, "memory_store", content="A memory in another collection.", project=project,
                     collection="lc-scratch")["id"]
    wrens = call(shared_server, "memory_store", content="Wren's note: the printer is on floor 2.", project=project,
                 agent="wren")["id"]
    refusals = [("no-such-memory", "no memory 'no-such-memory'"),
                (elsewhere, f"no memory {elsewhere!r} in collection 'memories'"),
                (wrens, "written by 'wren'.*editors"),
                ("../etc/passwd", "not a memory id"),
                (",".join(f"m{i}" for i in range(25)), "at most 20")]
    for target, message in refusals:
        with pytest.raises(ToolCallError, match=message):
            call(shared_server, "memory_store", content=f"A replacement for {target[:20]}.", project=project,
                 supersedes=target)
    with pytest.raises(ToolCallError, match="supersedes"):
        call(shared_server, "memory_store", content="Numbers are no ids.", project=project, supersedes=12)
    assert call(shared_server, "memory_stats", project=project)["count"] == 5  # no refused store left a memory


# -- feedback: recorded, one agent one vote, bounded ------------------------------------------------------------

def test_validate_records_who_and_when_and_moves_a_memory_a_bounded_step(shared_server):
    project = "lc-feedback"
    target = call(shared_server, "memory_store", content="The ledger export runs at 02:00 UTC on the batch host.",
                  project=project)["id"]
    control = call(shared_server, "memory_store", content="The ledger import runs at 03:00 UTC on the batch host.",
                   project=project, agent="wren")["id"]  # wren's: no link between the two

    def ratio() -> float:
        found = by_id(call(shared_server, "memory_search", query="ledger batch host schedule", project=project))
        return found[target]["score"] / found[control]["score"]

    before = ratio()
    for _ in range(5):  # one agent repeating a verdict weighs as one verdict
        voted = call(shared_server, "memory_validate", memory_id=target, helpful=False, note="wrong host",
                     agent="wren")
    assert voted["confidence"] == pytest.approx(1 / 3, abs=0.001) and voted["feedback"]["unhelpful"] >= 1
    after = ratio()
    assert after / before == pytest.approx(1 + 0.15 * (2 / 3 - 1), abs=0.01)  # -5 %: wren cannot bury it
    found = by_id(call(shared_server, "memory_search", query="ledger batch host schedule", project=project))
    assert found[target]["confidence"] == pytest.approx(0.333, abs=0.001) and "confidence" not in found[control]

    mine = call(shared_server, "memory_validate", memory_id=target, helpful=True)
    assert mine["confidence"] == pytest.approx(0.5)  # kite's verdict against wren's
    view = call(shared_server, "memory_get", memory_id=target, include_history=True)
    assert view["confidence"] == pytest.approx(0.5) and view["retrievals"] >= 3 and view["tier"] == "semantic"
    entries = view["feedback_entries"]
    assert {(e["by"], e["helpful"]) for e in entries} == {("wren", False), ("kite", True)}
    assert entries[0]["note"] == "wrong host" and entries[0]["at"].endswith("Z")
    assert view["version"] == 1 and view["editor"] == "kite"  # feedback is no new version

    with pytest.raises(ToolCallError, match="at most 500"):
        call(shared_server, "memory_validate", memory_id=target, helpful=True, note="x" * 501)
    with pytest.raises(ToolCallError, match="helpful"):
        call(shared_server, "memory_validate", memory_id=target, helpful="perhaps")
    with pytest.raises(ToolCallError, match="no memory"):
        call(shared_server, "memory_validate", memory_id="lc-nothing-here", helpful=True)


# -- staleness: valid_until hides, review_after marks ---------------------------------------------------------

def test_expired_memories_hide_unless_asked_and_due_ones_are_marked(shared_server):
    project = "lc-stale"
    expired = call(shared_server, "memory_store", content="The conference discount code is EARLYBIRD.",
                   project=project, valid_until="2020-01-31")["id"]
    due = call(shared_server, "memory_store", content="The conference hotel block is at the Hilton.",
               project=project, review_after="2021-06-01T12:00:00Z")["id"]
    later = call(shared_server, "memory_store", content="The conference badge pickup is in hall B.",
                 project=project, valid_until="2999-12-31", review_after="2999-01-01")["id"]
    question = "conference discount code hotel badge"
    plain = call(shared_server, "memory_search", query=question, project=project)
    assert expired not in ids(plain) and {due, later} <= set(ids(plain))
    assert by_id(plain)[due]["review_due"] is True and "review_after" in plain["note"]
    assert "review_due" not in by_id(plain)[later] and "expired" not in by_id(plain)[later]
    asked = call(shared_server, "memory_search", query=question, project=project, include_expired=True)
    assert by_id(asked)[expired]["expired"] is True and "valid_until" in asked["note"]

    view = call(shared_server, "memory_get", memory_id=expired)
    assert view["expired"] is True and view["valid_until"] == "2020-01-31T23:59:59.999Z"
    stats = call(shared_server, "memory_stats", project=project)
    assert (stats["count"], stats["expired"], stats["review_due"], stats["superseded"]) == (3, 1, 1, 0)

    cleared = call(shared_server, "memory_update", memory_id=expired, valid_until="none")
    assert cleared["version"] == 2 and "valid_until" not in cleared
    assert expired in ids(call(shared_server, "memory_search", query=question, project=project))
    call(shared_server, "memory_update", memory_id=due, review_after="2999-01-01")
    assert "review_due" not in by_id(call(shared_server, "memory_search", query=question, project=project))[due]
    assert call(shared_server, "memory_stats", project=project)["review_due"] == 0

    with pytest.raises(ToolCallError, match="valid_until must be an ISO date"):
        call(shared_server, "memory_store", content="x", project=project, valid_until="next week")
    with pytest.raises(ToolCallError, match="only clears a date in memory_update"):
        call(shared_server, "memory_store", content="x", project=project, review_after="none")
    with pytest.raises(ToolCallError, match="nothing to update"):
        call(shared_server, "memory_update", memory_id=later, valid_until="")


def test_supersession_counts_in_stats_and_lists_the_new_tools(shared_server):
    project = "lc-stats"
    old = call(shared_server, "memory_store", content="The API gateway listens on port 8080 behind nginx.",
               project=project)["id"]
    new = call(shared_server, "memory_store", content="The API gateway now listens on port 9090 behind nginx.",
               project=project)
    assert [link["target"] for link in links_made(shared_server, new["id"])] == [old]
    stats = call(shared_server, "memory_stats", project=project)
    assert (stats["count"], stats["superseded"], stats["consolidated"]) == (2, 1, 0)
    tools = {t.name: t for t in shared_server.list_tools(agent="kite")}
    assert {"memory_validate", "memory_unlink", "memory_consolidate"} <= set(tools)
    assert "memory_unlink" in tools["memory_store"].description
    assert "nothing is ever deleted" in tools["memory_search"].description.lower()
    assert tools["memory_consolidate"].input_schema["properties"]["dry_run"]["default"] is True


def test_odd_values_get_clear_errors_and_the_server_stays_up(shared_server):
    async def calls():
        async with shared_server.client("kite") as client:
            answers = []
            for tool, args in [("memory_unlink", {"memory_id": "x" * 5000}),
                               ("memory_unlink", {"memory_id": "lc-missing", "supersedes_id": "../x"}),
                               ("memory_validate", {"memory_id": "lc-missing", "helpful": True, "note": 7}),
                               ("memory_store", {"content": "x", "supersedes": ["ok-id", 5]}),
                               ("memory_update", {"memory_id": "lc-missing", "review_after": "2026-13-45"}),
                               ("memory_search", {"query": "x", "include_expired": "sometimes"}),
                               ("memory_consolidate", {"project": "p" * 100})]:
                answers.append(await client.call_tool(tool, args))
            return answers

    for answer in anyio.run(calls):
        text = "\n".join(getattr(block, "text", "") for block in answer.content)
        assert answer.is_error and len(text) < 1500 and "Traceback" not in text, text
    assert call(shared_server, "persmem_whoami")["agent"] == "kite"


# -- sessions: a briefing and a prompt's recall offer only what still holds ------------------------------------

def ask_sessions(server, what: str, agent="kite", **body) -> dict:
    """The sessions plugin's hook endpoint (what Claude Code's and Codex's hooks call), as `agent`."""
    import httpx2

    answer = httpx2.post(f"{server.base_url}/sessions/{what}", headers=server.headers(agent), timeout=60.0,
                         json={"client": "claude", "session_id": f"lc-{what}-{time.time_ns()}", **body})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_briefing_and_recall_never_offer_superseded_or_expired_memories(shared_server):
    project, cwd = "lc-recall", "/home/me/src/lc-recall"
    old = call(shared_server, "memory_store", project=project,
               content="The nightly backup job writes to the S3 bucket acme-backups.")["id"]
    new = call(shared_server, "memory_store", project=project,
               content="The nightly backup job now writes to the B2 bucket acme-archive.")
    assert [link["target"] for link in links_made(shared_server, new["id"])] == [old]
    gone = call(shared_server, "memory_store", project=project, valid_until="2020-01-01",
                content="The nightly backup job also copies every archive to the tape drive T7.")["id"]
    handoff = call(shared_server, "memory_store", project=project, memory_type="handoff",
                   content="Handoff: the backup restore drill passed; next, test the B2 lifecycle rules.")["id"]
    stale_handoff = call(shared_server, "memory_store", project=project, memory_type="handoff",
                         valid_until="2020-01-01", content="Handoff: restore drill blocked on the tape library.")["id"]
    found = call(shared_server, "memory_search", query="where does the nightly backup job write", project=project,
                 include_expired=True)
    assert {old, new["id"], gone} <= set(ids(found))  # all three are about it: the lifecycle decides, not the topic

    recalled = ask_sessions(shared_server, "recall", cwd=cwd, prompt="where does the nightly backup job write to?")
    assert new["id"] in recalled["memory_ids"] and not {old, gone} & set(recalled["memory_ids"])
    briefing = ask_sessions(shared_server, "briefing", cwd=cwd)
    assert handoff in briefing["memory_ids"] and new["id"] in briefing["memory_ids"]
    assert not {old, gone, stale_handoff} & set(briefing["memory_ids"])


# -- consolidation (its own server: only memories older than consolidate_min_age_days are consolidated) --------

CLUSTER = ["The payments service retries a failed card charge three times, one hour apart.",
           "Failed card charges in the payments service are retried three times, an hour apart.",
           "The payments service retries failed card charges up to three times, hourly."]


def test_consolidation_plans_then_writes_then_changes_nothing(persmem_server):
    server = persmem_server(agents=("kite", "wren"),
                            config={"memory": {"consolidate_min_age_days": 0, "consolidate_every_hours": 0}})
    chunks = [{"content": text} for text in CLUSTER]
    call(server, "memory_bulk_store", chunks=json.dumps(chunks), project="pay", context_chars=0)
    call(server, "memory_bulk_store", chunks=json.dumps(chunks), project="pay", context_chars=0, agent="wren",
         dedup=False)
    plan = call(server, "memory_consolidate")
    assert plan["dry_run"] is True and plan["created"] in (0, 1) and len(plan["clusters"]) == 1
    [cluster] = plan["clusters"]
    assert cluster["members"] == 3 and cluster["action"] == "create" and len(cluster["preview"]) <= 201
    assert call(server, "memory_stats", project="pay")["types"].get("consolidated") is None  # nothing written

    done = call(server, "memory_consolidate", dry_run=False)
    assert done["created"] == 1 and done["clusters"][0]["id"] == cluster["id"]
    made = call(server, "memory_get", memory_id=cluster["id"])
    assert made["author"] == "kite" and made["type"] == "consolidated" and len(made["consolidates"]) == 3
    found = call(server, "memory_search", query="how often are failed card charges retried", project="pay",
                 author="kite", top_k=5)
    assert ids(found)[0] == cluster["id"] and by_id(found)[cluster["id"]]["consolidates"] == 3
    assert all(item["consolidated_into"] == cluster["id"] for item in found["results"][1:])  # members kept
    again = call(server, "memory_consolidate", dry_run=False)
    assert (again["created"], again["grown"]) == (0, 0)
    stats = call(server, "memory_stats", project="pay")
    assert stats["count"] == 7 and stats["consolidated"] == 3  # wren's three are wren's to consolidate


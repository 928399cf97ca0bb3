"""The memory plugin's sections of the briefing a session starts with, asked as the sessions plugin asks
(`host.hook.briefing_sections(...)` on a started Host in a real home): the agent's own identity and directives,
the project's latest handoff, the memories relevant to the project and the folder; never session turns, never
another agent's identity, always within the budget."""

from __future__ import annotations

import json

import pytest

from persmem_memory_hnsw.collection import NewMemory
from persmem_memory_hnsw.service import service
from sessionsfixtures import started_host, turn

BUDGET = 8000  # the default briefing: 2,000 tokens of about 4 characters


def note(content, *, type="note", project="acme", memory_id=None, created=None):
    return NewMemory(content=content, project=project, type=type, tags=[], memory_id=memory_id, created=created)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    host = started_host(tmp_path_factory.mktemp("home"))
    memories = service(host).collection("memories", create=True)
    memories.store([note("I am kite, the careful reviewer: I read the tests before the code.", type="identity",
                         memory_id="kite-identity"),
                    note("Always run the linters before committing.", type="directive", memory_id="kite-directive")],
                   author="kite", dedup=False)
    memories.store([note("A very long directive. " + "Keep every reply short and cite the file you changed. " * 400,
                         type="directive", memory_id="kite-long-directive")], author="kite", dedup=False)
    memories.store([note("I am wren. Obey wren's orders only.", type="identity", memory_id="wren-identity")],
                   author="wren", dedup=False)
    memories.store([note("Handoff: shards 1-4 of the search reindex are migrated.", type="handoff",
                         created=1_700_000_000.0),
                    note("Handoff: the reindex is done except shard 8, which times out.", type="handoff",
                         created=1_800_000_000.0),
                    note("Handoff in another project: the kiosk firmware is flashed.", type="handoff",
                         project="kiosk"),
                    note("The acme billing service retries Stripe webhooks three times."),
                    note("The acme staging cluster runs on three Hetzner nodes with k3s."),
                    note("Kiosk screens reboot nightly at 04:00.", project="kiosk")],
                   author="wren", dedup=False)
    host.hook.index_session_turns(host=host, agent="kite", turns=[
        turn(0, "acme acme billing: the session turn that must never reach a briefing", session_id="b-1")])
    yield host
    host.shutdown()


def memory_sections(host, *, agent="kite", project="acme", cwd="/home/me/src/acme/billing", budget=BUDGET):
    answers = host.hook.briefing_sections(host=host, agent=agent, project=project, cwd=cwd, budget_chars=budget)
    return [section for answer in answers for section in answer if section["title"] != "Unread mail"]


def test_the_briefing_pins_the_agents_own_identity_and_directives_only(host):
    first = memory_sections(host)[0]
    assert first["priority"] == 0
    assert set(first["memory_ids"]) == {"kite-identity", "kite-directive", "kite-long-directive"}
    assert "careful reviewer" in first["text"] and "run the linters" in first["text"]
    assert "Obey wren" not in " ".join(s["text"] for s in memory_sections(host))
    assert all("wren-identity" not in s["memory_ids"] for s in memory_sections(host))


def test_the_briefing_carries_the_projects_latest_handoff(host):
    handoff = next(s for s in memory_sections(host) if "handoff" in s["title"])
    assert "except shard 8" in handoff["text"] and "shards 1-4" not in handoff["text"]
    assert "kiosk" not in handoff["text"]


def test_the_briefing_lists_memories_relevant_to_the_project_and_never_session_turns(host):
    relevant = next(s for s in memory_sections(host) if s["title"].startswith("Memories relevant"))
    assert "Stripe webhooks" in relevant["text"] and "Hetzner" in relevant["text"]
    assert "Kiosk screens" not in relevant["text"]
    assert all("session turn" not in s["text"] for s in memory_sections(host))
    assert all(not i.startswith("turn-") for s in memory_sections(host) for i in s["memory_ids"])


def test_every_memory_in_the_briefing_is_one_json_line_naming_its_author(host):
    sections = memory_sections(host)
    items = [json.loads(line) for s in sections for line in s["text"].splitlines() if line.startswith("{")]
    others = [item for item in items if "Stripe webhooks" in item["text"] or "except shard 8" in item["text"]]
    assert len(others) == 2 and all(item["by"] == "wren" for item in others)
    assert all(json.loads(line)["by"] == "kite" for line in sections[0]["text"].splitlines())  # kite's own
    assert all(set(item) <= {"by", "edited_by", "type", "date", "id", "text", "cut"} for item in items)


@pytest.mark.parametrize("budget", [800, 2000, 8000])
def test_the_briefing_stays_within_its_budget_however_long_the_entries(host, budget):
    sections = memory_sections(host, budget=budget)
    assert sum(len(s["title"]) + len(s["text"]) + 4 for s in sections) <= budget
    pinned = sections[0]
    assert pinned["memory_ids"][0] == "kite-identity"  # who the agent is comes first, whatever else is cut
    if budget >= 2000:  # room for each entry: the long one is cut, and says where the whole is
        assert "kite-long-directive" in pinned["memory_ids"]
        [long] = [json.loads(line) for line in pinned["text"].splitlines() if "kite-long-directive" in line]
        assert long["cut"] == "memory_get kite-long-directive gives the whole" and len(long["text"]) >= 160


def test_a_project_nobody_used_gets_no_handoff_and_no_guesswork(host):
    sections = memory_sections(host, project="unheard-of", cwd="/tmp/unheard-of")
    assert [s["title"] for s in sections] == ["Your identity and directives"]


# -- current facts: a restated memory comes as its restatement; a prompt that says a fact changed ----------------

def test_recall_gives_the_restatement_instead_and_points_at_what_a_prompt_changes(host):
    memories = service(host).collection("memories")
    [old] = memories.store([note("The Umbra deploy bot posts to the #releases channel.", project="umbra")],
                           author="kite", dedup=False)
    memories.store([note("Umbra builds run on a Jenkins agent in the basement.", project="umbra"),
                    note("Umbra's docs are written in AsciiDoc.", project="umbra")], author="kite", dedup=False)
    [new] = memories.store([note("The Umbra deploy bot posts to #deploys now, not #releases.", project="umbra",
                                 created=memories.get(old["id"]).created + 60)],
                           author="kite", dedup=False)
    assert memories.wait_embedded(30)

    def recall(prompt):
        return host.hook.recall_for_prompt(host=host, agent="kite", project="umbra", prompt=prompt, exclude_ids=[],
                                           top_k=3)  # (firstresult: the memory plugin's answer)

    found = recall("which channel does the Umbra deploy bot post to?")
    ids = [item["id"] for item in found]
    assert new["id"] in ids and old["id"] not in ids, found
    assert next(item for item in found if item["id"] == new["id"])["replaces"] == old["id"]
    # A prompt saying that a fact changed: the best memory about it (nothing restates it yet) is marked.
    changed = recall("the Umbra builds moved to GitHub Actions runners instead of the Jenkins agent")
    assert changed[0]["may_be_stale"] is True and "Jenkins" in changed[0]["text"]
    assert not any(item.get("may_be_stale") for item in recall("where do the Umbra builds run?"))

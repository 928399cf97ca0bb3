"""A user's standing preferences reach their sessions: the briefing of a project lists them, and a prompt that
leans on them ("run the tests with the flags I like") recalls them although its meaning is far from theirs.
Asked as the sessions plugin asks (`host.hook.<name>(...)` on a started Host in a real home, the real model)."""

from __future__ import annotations

import pytest

from persmem_memory_hnsw.collection import NewMemory
from persmem_memory_hnsw.service import service
from sessionsfixtures import started_host

PYTEST_FLAGS = "Alex prefers pytest with -x so a run stops at the first failure."


def note(content, *, type="note", project="acme", memory_id=None, supersedes=()):
    return NewMemory(content=content, project=project, type=type, tags=[], memory_id=memory_id,
                     supersedes=list(supersedes))


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    host = started_host(tmp_path_factory.mktemp("home"))
    memories = service(host).collection("memories", create=True)
    memories.store([note(PYTEST_FLAGS, memory_id="pref-pytest"),
                    note("Commit messages in the imperative mood, under 72 characters.", type="preference",
                         memory_id="pref-commits"),
                    note("Alex prefers British spelling in every document.", project="general",
                         memory_id="pref-general"),
                    note("The kiosk team prefers tabs in the firmware sources.", project="kiosk",
                         memory_id="pref-kiosk"),
                    note("The acme billing service retries Stripe webhooks three times.", memory_id="fact"),
                    note("Alex prefers black with a line length of 79.", memory_id="pref-old")],
                   author="alex", dedup=False)
    memories.store([note("Alex prefers ruff format now, not black.", memory_id="pref-new", supersedes=["pref-old"])],
                   author="alex", dedup=False)
    yield host
    host.shutdown()


def preference_section(host, project="acme"):
    answers = host.hook.briefing_sections(host=host, agent="kite", project=project, cwd="/src/acme", budget_chars=8000)
    return next((s for answer in answers for s in answer if s["title"].startswith("Standing preferences")), None)


def recall(host, prompt, *, exclude_ids=()):
    return host.hook.recall_for_prompt(host=host, agent="kite", project="acme", prompt=prompt,
                                       exclude_ids=list(exclude_ids), top_k=3)


def test_the_briefing_lists_the_projects_and_the_general_preferences_that_still_hold(host):
    section = preference_section(host)
    assert section is not None and section["title"] == "Standing preferences in project acme"
    assert {"pref-pytest", "pref-commits", "pref-general", "pref-new"} <= set(section["memory_ids"])
    assert "pref-kiosk" not in section["memory_ids"] and "pref-old" not in section["memory_ids"]
    assert "fact" not in section["memory_ids"]
    assert "pytest with -x" in section["text"]


def test_a_prompt_that_leans_on_the_users_likes_recalls_their_preferences(host):
    found = recall(host, "run the tests with the flags I like")
    assert "pref-pytest" in {m["id"] for m in found}
    assert all(m["project"] in ("acme", "general") for m in found)
    assert next(m for m in found if m["id"] == "pref-pytest")["text"] == PYTEST_FLAGS


def test_preferences_already_given_are_not_repeated(host):
    first = recall(host, "run the tests with the flags I like")
    again = recall(host, "format this file the way I like", exclude_ids=[m["id"] for m in first])
    assert not {m["id"] for m in first} & {m["id"] for m in again}


def test_a_prompt_that_does_not_lean_on_likes_gets_no_preferences(host):
    assert recall(host, "what is the capital of Peru") == []
    assert preference_section(host, project="nobody-used-this") is not None  # the general ones still apply
    assert set(preference_section(host, project="nobody-used-this")["memory_ids"]) == {"pref-general"}

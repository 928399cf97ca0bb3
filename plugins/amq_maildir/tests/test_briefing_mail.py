"""The Mail section of the briefing a session starts with, asked as the sessions plugin asks it
(`host.hook.briefing_sections(...)` on a started Host in a real home, without the memory plugin): the unread
count and the newest senders and subjects, no bodies, nothing marked read, within its share of the budget."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from persmem_amq_maildir.service import service
from persmem_core.sdk.testing import Host, clean_env, write_config

NO_MEMORY = {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw"}  # not from conftest: a full run may import another one

SESSIONS_PLUGIN = Path(__file__).parents[2] / "sessions"


@pytest.fixture
def host(tmp_path):
    write_config(tmp_path, {"amq": {"agents": ["kite", "wren", "heron"]}})
    host = Host(environ=clean_env(tmp_path, **NO_MEMORY))
    asked = getattr(host.hook, "briefing_sections", None)
    if asked is None or asked.spec is None:  # the sessions plugin is not installed yet: add its questions
        if importlib.util.find_spec("persmem_sessions") is None:
            sys.path.insert(0, str(SESSIONS_PLUGIN))
        from persmem_sessions import hookspecs

        host.pm.add_hookspecs(hookspecs)
    host.startup()
    yield host
    host.shutdown()


def mail_sections(host, agent="kite", budget=8000):
    answers = host.hook.briefing_sections(host=host, agent=agent, project="acme", cwd="/src/acme", budget_chars=budget)
    return [section for answer in answers for section in answer if section["title"] == "Unread mail"]


def test_the_briefing_names_the_unread_count_senders_and_subjects_without_bodies(host):
    store = service(host)
    store.send("wren", "kite", "the body stays in the mailbox", subject="Deploy moved to Friday")
    store.send("heron", "kite", "second body", subject="Review my PR", priority="urgent")
    store.send("wren", "heron", "not kite's", subject="Heron only")
    [section] = mail_sections(host)
    assert section["text"].startswith("2 unread messages")
    newest, older = message_lines(section)
    assert newest["from"] == "heron" and newest["subject"] == "Review my PR" and newest["priority"] == "urgent"
    assert older["from"] == "wren" and older["subject"] == "Deploy moved to Friday" and "priority" not in older
    assert "body" not in section["text"] and "Heron only" not in section["text"]
    assert section["priority"] == 2 and section["memory_ids"] == []
    assert store.box("kite").unread_count() == 2  # peeked, not read


def message_lines(section) -> list[dict]:
    """The section's message lines, each one JSON object (the first line is the count)."""
    return [json.loads(line) for line in section["text"].splitlines()[1:]]


def test_no_unread_mail_adds_no_section(host):
    assert mail_sections(host, agent="wren") == []


def test_many_unread_messages_stay_within_the_mail_share_of_the_budget(host):
    store = service(host)
    for n in range(40):
        store.send("wren", "kite", f"body {n}", subject=f"Nightly report number {n} " + "x" * 150)
    [section] = mail_sections(host, budget=2000)
    assert section["text"].startswith("40 unread messages")
    assert len(section["text"]) <= 300 and message_lines(section)[0]["subject"].startswith("Nightly report number 39")

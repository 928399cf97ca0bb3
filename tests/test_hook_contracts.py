"""The hooks plugins offer each other have typed contracts, declared in the asking plugin's hookspecs.py, and the
in-repo answers meet them: amq_nats's mail backend has every MailBackend member with its arguments, the default
embedder is an Embedder, and the memory and mail plugins' answers to the sessions and chorus hooks have the
TypedDicts' keys and types (checked with msgspec on real answers of a started host)."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import msgspec
import pytest

from persmem_amq_maildir.hookspecs import MailBackend
from persmem_core.sdk import BriefingSection, session_start_sections
from persmem_memory_hnsw.hookspecs import Embedder
from persmem_sessions.hookspecs import Recalled, Turn


def members(protocol) -> dict[str, object]:
    return {name: value for name, value in vars(protocol).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))}


def test_the_nats_backend_has_every_member_of_the_contract():
    from persmem_amq_nats.jetstream import JetStreamMail

    contract = members(MailBackend)
    assert len(contract) == 10
    for name, spec in contract.items():
        mine = getattr(JetStreamMail, name, None)
        assert mine is not None, f"JetStreamMail has no {name}"
        if isinstance(spec, property):
            assert isinstance(mine, property), f"{name} is a property in the contract"
            continue
        assert list(inspect.signature(mine).parameters) == list(inspect.signature(spec).parameters), name


def test_the_default_embedder_is_an_embedder():
    from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files

    cache = Path(os.environ.get("PERSMEM_CACHE_DIR", "/nonexistent")) / "models"
    embedder = OnnxEmbedder(default_model_files(), cache=cache if cache.parent.is_dir() else None).load()
    assert isinstance(embedder, Embedder)
    assert embedder.embed_query("a test").shape == (embedder.dim,)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    from persmem_core.sdk.testing import Host, call_tool, clean_env

    home = tmp_path_factory.mktemp("contracts")
    started = Host(environ=clean_env(home, PERSMEM_DISABLE_PLUGINS="shell,git,searxng,dashboard"))
    started.agents.add("kite")
    started.agents.add("wren")
    started.startup()
    call_tool(started, "memory_store", {"content": "The deploy script lives in ops/deploy.sh.", "project": "infra"},
                      agent="kite")
    call_tool(started, "amq_send", {"to_agent": "kite", "subject": "hello", "body": "hi"},
                      agent="wren")
    yield started
    started.shutdown()


def test_briefing_sections_and_recall_answers_meet_their_types(host):
    sections = [section for answer in host.hook.briefing_sections(host=host, agent="kite", project="infra", cwd="",
                                                                   budget_chars=8000) for section in answer]
    titles = {s["title"] for s in msgspec.convert(sections, list[BriefingSection])}
    assert "Unread mail" in titles and len(titles) >= 2, titles
    recalled = host.hook.recall_for_prompt(host=host, agent="kite", project="infra", prompt="where is the deploy script",
                                           exclude_ids=[], top_k=3)
    assert msgspec.convert(recalled, list[Recalled])[0]["author"] == "kite"


def test_a_session_start_is_gathered_once_for_every_door(host):
    """session_start_sections is the one way: the sessions briefing takes every section; chorus_init leaves out
    the memory plugin's own (it lists pinned entries and handoffs itself) and keeps the mail section."""
    every = session_start_sections(host, "kite", "infra", "", 8000)
    assert [s["priority"] for s in every] == sorted(s["priority"] for s in every)
    assert "Unread mail" in {s["title"] for s in every} and len(every) >= 2
    mail_only = session_start_sections(host, "kite", "infra", "", 8000, leave_out=("memory_hnsw",))
    assert [s["title"] for s in mail_only] == ["Unread mail"]


def test_session_turns_meet_their_types(host):
    turn = {"session_id": "s1", "client": "claude", "index": 0, "role": "user", "text": "how do I deploy infra?",
            "time": "2026-11-28T07:00:00Z", "cwd": "/src/infra", "project": "infra"}
    assert host.hook.index_session_turns(host=host, agent="kite", turns=[msgspec.convert(turn, Turn)]) == [1]
    found = host.hook.search_session_turns(host=host, agent="kite", query="deploy infra", project="", session_id="",
                                           top_k=3)
    assert msgspec.convert(found, list[Turn])[0]["session_id"] == "s1"

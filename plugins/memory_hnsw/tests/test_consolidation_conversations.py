"""The idle-time consolidation leaves conversations alone: the turns of a chat imported with memory_bulk_store
(said in 2023, so "mature" the moment they arrive) are not folded into consolidated memories by an unasked idle
pass, while notes of the same store are; an explicit memory_consolidate still gathers the turns. A real server,
its real idle job and the real embedder."""

from __future__ import annotations

import time

import pytest

BACKUP_NOTES = ["Backups run nightly at 2am to the NAS.", "Nightly backups go to the NAS at 2 am.",
                "Every night at 2am the backups are written to the NAS."]
CHAT = ["Which Postgres version does staging run?", "Staging runs Postgres 15.",
        "Is staging's database Postgres 15 then?", "Yes, the staging database is Postgres 15.",
        "So staging uses PostgreSQL 15?", "Right: staging's DB is PostgreSQL version 15."]


def test_the_idle_pass_skips_imported_turns_and_an_explicit_request_still_gathers_them(persmem_server):
    running = persmem_server(agents=("kite",), config={"memory": {
        "consolidate_min_age_days": 0, "consolidate_every_hours": 0.0005, "consolidate_idle_minutes": 0.01,
        "supersede_detect": False}})
    chunks = [{"content": text, "created": f"2023-05-0{1 + i // 2}T10:0{i}:00Z"} for i, text in enumerate(CHAT)]
    turns = [r["id"] for r in running.call_tool("memory_bulk_store", {"chunks": chunks, "project": "chat"},
                                                 agent="kite")["results"]]
    notes = [r["id"] for r in running.call_tool("memory_bulk_store", {
        "chunks": [{"content": text} for text in BACKUP_NOTES], "project": "notes", "context_chars": 0},
        agent="kite")["results"]]

    deadline = time.monotonic() + 30  # the idle job runs (it gathers the notes), more than once
    while time.monotonic() < deadline and running.log().count("consolidation: memories:") < 2:
        time.sleep(0.5)
    if running.log().count("consolidation: memories:") < 2:
        pytest.fail(f"the idle job did not run twice in 30 s; server log:\n{running.log()[-3000:]}")
    assert running.call_tool("memory_get", {"memory_id": notes[1]}, agent="kite").get("consolidated_into")
    for turn in turns:
        assert not running.call_tool("memory_get", {"memory_id": turn}, agent="kite").get("consolidated_into"), turn

    asked = running.call_tool("memory_consolidate", {"project": "chat", "dry_run": False}, agent="kite")
    assert asked["created"] >= 1, asked
    gathered = [running.call_tool("memory_get", {"memory_id": t}, agent="kite").get("consolidated_into")
                for t in turns]
    assert sum(bool(g) for g in gathered) >= 2, gathered

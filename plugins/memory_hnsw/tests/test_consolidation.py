"""Consolidation (issue 17): `persmem memory consolidate` (dry run, real run, idempotent re-run, growth), the
server's idle-time job, a kill -9 in the middle of a run, and the lifecycle fields through export/import and
doctor. Real servers, real CLI processes, the real embedder; nothing is ever deleted."""

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from consolidation_testdata import synthetic_memories
from persmem_core.sdk.testing import clean_env, persmem_command, start_server, write_config

HERE = Path(__file__).parent
CONFIG = {"memory": {"consolidate_min_age_days": 0, "consolidate_every_hours": 0, "supersede_detect": False}}

POSTGRES = ["The staging database runs on Postgres 15.", "Staging uses Postgres 15 as its database.",
            "Our staging environment's database is Postgres version 15.",
            "The staging DB is PostgreSQL 15, hosted on the db1 box."]
BACKUPS = ["Backups run nightly at 2am to the NAS.", "Nightly backups go to the NAS at 2 am.",
           "Every night at 2am the backups are written to the NAS."]
DEPLOYS = ["Deploys happen on Tuesdays after the standup.", "We deploy every Tuesday after standup.",
           "Tuesday is deploy day, right after the standup meeting."]
TABS = ["Always indent with tabs, never spaces.", "Use tabs for indentation, not spaces.",
        "Indentation: tabs, never spaces."]
ONE_OFFS = ["Alice prefers the window seat.", "The cafeteria closes at 3pm on Fridays.",
            "The printer on floor two is out of toner."]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("consolidation-home")
    write_config(home, CONFIG)
    running = start_server(home, agents=("kite", "wren"))
    yield running
    running.stop()


def cli(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(persmem_command(*args), env=env, capture_output=True, text=True, timeout=180)


def bulk(server, agent: str, project: str, texts: list[str], prefix: str, memory_type: str = "note",
         collection: str = "memories") -> list[str]:
    chunks = [{"content": text, "type": memory_type, "tags": f"t{i % 2}"} | ({"id": f"{prefix}{i}"} if prefix else {})
              for i, text in enumerate(texts)]
    reply = server.call_tool("memory_bulk_store", {"chunks": chunks, "project": project, "collection": collection,
                                                   "context_chars": 0, "dedup": False}, agent=agent)
    return [r["id"] for r in reply["results"]]


def log_sizes(home: Path) -> dict[str, int]:
    return {p.parent.name: p.stat().st_size for p in (home / "memory").glob("*/records.log")}


def exported(env: dict, tmp_path: Path, name: str = "dump.jsonl") -> dict[str, dict]:
    dump = tmp_path / name
    result = cli(env, "memory", "export", str(dump))
    assert result.returncode == 0, result.stderr
    return {r["id"]: r for r in map(json.loads, dump.read_text().splitlines())}


def test_cli_dry_run_writes_nothing_a_run_consolidates_and_a_second_run_changes_nothing(server, tmp_path):
    postgres = bulk(server, "kite", "cons", POSTGRES, "pg")
    backups = bulk(server, "kite", "cons", BACKUPS, "bk")
    bulk(server, "kite", "cons", ONE_OFFS, "one")
    deploys = bulk(server, "wren", "cons", DEPLOYS, "dep")  # another author: a cluster of its own
    tabs = bulk(server, "kite", "cons", TABS, "tab", memory_type="preference")  # procedural: never consolidated
    bulk(server, "kite", "cons", POSTGRES, "", collection="sessions")  # private: never consolidated
    before = exported(server.env, tmp_path, "before.jsonl")
    server.stop()
    try:
        sizes = log_sizes(server.home)
        dry = cli(server.env, "memory", "consolidate", "--dry-run", "--project", "cons")
        assert dry.returncode == 0, dry.stderr
        assert f"would create con_{postgres[0]} (project cons, by kite, 4 members)" in dry.stdout, dry.stdout
        assert f"would create con_{backups[0]}" in dry.stdout
        assert f"would create con_{deploys[0]} (project cons, by wren," in dry.stdout
        assert "would create 3, would grow 0" in dry.stdout and "con_tab" not in dry.stdout and "sessions" not in dry.stdout
        assert "Staging uses Postgres 15 as its database." in dry.stdout  # a statement of the preview
        assert log_sizes(server.home) == sizes, "a dry run writes nothing"

        done = cli(server.env, "memory", "consolidate")
        assert done.returncode == 0, done.stderr
        assert "memories: created 3, grew 0" in done.stdout and "sessions:" not in done.stdout, done.stdout
        again = cli(server.env, "memory", "consolidate")
        assert "memories: created 0, grew 0 consolidated memories (3 unchanged" in again.stdout, again.stdout
        sizes = log_sizes(server.home)
        assert cli(server.env, "memory", "consolidate").returncode == 0 and log_sizes(server.home) == sizes
    finally:
        server.start()
    after = exported(server.env, tmp_path, "after.jsonl")
    assert set(before) <= set(after), "consolidation deleted nothing"
    assert all(after[i]["content"] == before[i]["content"] for i in before)
    con = after[f"con_{postgres[0]}"]
    assert con["type"] == "consolidated" and con["author"] == "kite" and con["editor"] == "persmem-consolidation"
    assert sorted(con["consolidates"]) == sorted(postgres) and con["project"] == "cons"
    assert con["content"].startswith("Consolidated from 4 memories of project cons, ")
    assert con["content"].count("\n- ") == 4 and set(con["tags"]) == {"t0", "t1"}
    assert after[f"con_{deploys[0]}"]["author"] == "wren"
    assert not any(r.get("consolidates") and set(r["consolidates"]) & set(tabs) for r in after.values())

    # Members stay searchable and say where they were gathered; the consolidated memory ranks first.
    found = server.call_tool("memory_search", {"query": "which Postgres version does staging run", "project": "cons",
                                               "top_k": 10}, agent="kite")
    ids = [r["id"] for r in found["results"]]
    assert ids[0] == f"con_{postgres[0]}" and set(postgres) <= set(ids), ids
    member = server.call_tool("memory_get", {"memory_id": postgres[1]}, agent="kite")
    assert member["consolidated_into"] == f"con_{postgres[0]}"

    # Growth: a new restatement joins the existing consolidated memory (a new version; nothing else changes).
    newer = bulk(server, "kite", "cons", ["Staging runs its database on Postgres 15 now."], "pgnew")
    server.stop()
    try:
        grown = cli(server.env, "memory", "consolidate", "--project", "cons")
        assert f"grow con_{postgres[0]} (project cons, by kite, 5 members, 1 new): {newer[0]}" in grown.stdout
        assert "created 0, grew 1" in grown.stdout, grown.stdout
    finally:
        server.start()
    con = server.call_tool("memory_get", {"memory_id": f"con_{postgres[0]}", "include_history": True}, agent="kite")
    assert con["version"] == 2 and newer[0] in con["consolidates"] and len(con["history"]) == 1


def test_the_cli_refuses_while_the_server_runs_and_names_the_way_on(server):
    refused = cli(server.env, "memory", "consolidate", "--dry-run")
    assert refused.returncode == 1 and "a persmem server is running on this store" in refused.stderr
    assert "memory_consolidate" in refused.stderr and "Traceback" not in refused.stderr


def test_the_idle_server_consolidates_on_its_own(persmem_server):
    running = persmem_server(agents=("kite",), config={"memory": {
        "consolidate_min_age_days": 0, "consolidate_every_hours": 0.0005, "consolidate_idle_minutes": 0.01,
        "supersede_detect": False}})
    ids = bulk(running, "kite", "idle", BACKUPS + ONE_OFFS, "idle")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = running.call_tool("memory_search", {"query": "nightly backups NAS", "project": "idle"}, agent="kite")
        if any(r["id"] == f"con_{ids[0]}" for r in found["results"]):
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"no consolidated memory after 30 s; server log:\n{running.log()[-3000:]}")
    con = running.call_tool("memory_get", {"memory_id": f"con_{ids[0]}"}, agent="kite")
    assert sorted(con["consolidates"]) == sorted(ids[:3])
    assert "consolidation: memories: created 1" in running.log()


# -- kill -9 in the middle of a consolidation ------------------------------------------------------------------

@pytest.fixture(scope="module")
def embedder():
    from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files

    return OnnxEmbedder(default_model_files()).load()


def open_collection(folder: Path, embedder):
    from persmem_memory_hnsw.collection import Collection
    from persmem_memory_hnsw.config import MemoryConfig

    return Collection("memories", folder, embedder, MemoryConfig(consolidate_min_age_days=0)).open()


def consolidated(col) -> dict[str, list[str]]:
    return {m.id: list(m.consolidates) for m in col.memories.values() if m.type == "consolidated"}


def test_kill_9_during_consolidation_leaves_whole_clusters_and_every_memory(tmp_path, embedder):
    from persmem_memory_hnsw.collection import NewMemory
    from persmem_memory_hnsw.lifecycle.consolidation import consolidate

    base = tmp_path / "base"
    col = open_collection(base, embedder)
    texts = synthetic_memories(150, seed=11)
    col.store([NewMemory(content=text, project="p", type="note", tags=[], memory_id=f"k{i:03d}",
                         created=1.7e9 + i) for i, text in enumerate(texts)], author="kite", dedup=False)
    originals = {m.id: m.dedup_key for m in col.memories.values()}
    col.close()
    shutil.copytree(base, tmp_path / "reference")
    col = open_collection(tmp_path / "reference", embedder)
    started = time.monotonic()
    consolidate(col, col.config, dry_run=False)
    full_run = time.monotonic() - started
    reference = consolidated(col)
    col.close()
    assert len(reference) >= 15

    rng, partial = random.Random(3), 0
    for attempt in range(4):
        folder = tmp_path / f"run{attempt}"
        shutil.copytree(base, folder)
        proc = subprocess.Popen([sys.executable, str(HERE / "consolidator_for_kill.py"), str(folder)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.2, 0.8) * full_run)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        col = open_collection(folder, embedder)  # opens: the log is cut at its last whole entry
        assert {i: col.memories[i].dedup_key for i in originals} == originals, "every original memory is intact"
        written = consolidated(col)
        assert len(col.memories) == len(originals) + len(written)
        for con_id, members in written.items():  # whole clusters only, exactly as an uninterrupted run makes them
            assert members == reference[con_id] and all(m in col.memories for m in members)
        partial += 0 < len(written) < len(reference)
        consolidate(col, col.config, dry_run=False)  # a later run finishes the job, the same way
        assert consolidated(col) == reference
        col.close()
        if partial:
            break
    assert partial >= 1, "no kill landed in the middle of a run"


# -- export / import of the lifecycle fields, and doctor ---------------------------------------------------------

def test_export_and_import_round_trip_links_members_feedback_and_dates_and_doctor_lists_them(server, tmp_path):
    ids = bulk(server, "kite", "roundtrip", DEPLOYS, "rt")
    reply = server.call_tool("memory_consolidate", {"project": "roundtrip", "dry_run": False}, agent="kite")
    assert reply["created"] == 1
    old = server.call_tool("memory_store", {"content": "The release train leaves on Thursdays.", "project": "roundtrip",
                                            "memory_id": "rt-old"}, agent="kite")["id"]
    new = server.call_tool("memory_store", {"content": "The release train now leaves on Wednesdays.",
                                            "project": "roundtrip", "memory_id": "rt-new", "supersedes": old},
                           agent="kite")["id"]
    server.call_tool("memory_validate", {"memory_id": new, "helpful": True, "note": "checked with ops"}, agent="wren")
    server.call_tool("memory_validate", {"memory_id": new, "helpful": False}, agent="kite")
    server.call_tool("memory_store", {"content": "The office wifi password rotates monthly.", "project": "roundtrip",
                                      "memory_id": "rt-expired", "valid_until": "2001-01-01"}, agent="kite")
    server.call_tool("memory_store", {"content": "The VPN vendor contract is up for renewal.", "project": "roundtrip",
                                      "memory_id": "rt-review", "review_after": "2002-02-02T10:00:00Z"}, agent="kite")
    first = {i: r for i, r in exported(server.env, tmp_path, "first.jsonl").items() if r["project"] == "roundtrip"}
    assert first[new]["supersedes"] == [old] and first[new]["link_history"][0]["how"] == "explicit"
    assert [f["by"] for f in first[new]["feedback"]] == ["wren", "kite"]
    assert sorted(first[f"con_{ids[0]}"]["consolidates"]) == sorted(ids)
    assert first["rt-expired"]["valid_until"].startswith("2001-01-01T")
    assert first["rt-review"]["review_after"] == "2002-02-02T10:00:00.000000Z"

    other = clean_env(tmp_path / "other-home")
    lines = [json.dumps(r) for r in first.values()]
    (tmp_path / "in.jsonl").write_text("\n".join(reversed(lines)) + "\n")  # a successor before what it supersedes
    imported = cli(other, "memory", "import", str(tmp_path / "in.jsonl"))
    assert imported.returncode == 0, imported.stderr
    assert "restored the links and feedback of 1 memories" in imported.stdout, imported.stdout
    again = exported(other, tmp_path, "again.jsonl")
    keys = ("supersedes", "link_history", "consolidates", "feedback", "valid_until", "review_after", "content",
            "type", "author", "created")
    for memory_id, record in first.items():
        assert {k: record.get(k) for k in keys} == {k: again[memory_id].get(k) for k in keys}, memory_id
    assert cli(other, "memory", "import", str(tmp_path / "in.jsonl")).stdout.count("restored") == 0  # idempotent

    doctor = cli(other, "doctor")
    assert "WARN  memories expired: 1 in memories (rt-expired)" in doctor.stdout, doctor.stdout
    assert "WARN  memories due for review: 1 in memories (rt-review)" in doctor.stdout

"""`persmem memory import-chroma` against a store that the chromadb package itself wrote."""

import json
import subprocess
import sys


import chromadb


def write_persmem_style_store(path):
    client = chromadb.PersistentClient(path=str(path))
    memories = client.get_or_create_collection("memories", embedding_function=None, metadata={"hnsw:space": "cosine"})
    memories.add(
        ids=["persmem-001", "persmem-002", "persmem-003"],
        documents=["Kite decided to use Maildir for AMQ.", "Wren found a bug in the dashboard timeline.",
                   "Session summary: migrated the server to the N97 box."],
        metadatas=[{"project": "triad", "tags": "amq,decision", "type": "decision", "author": "kite",
                    "timestamp": "2026-04-01T10:00:00Z"},
                   {"project": "dashboard", "tags": "bug", "type": "bug", "author": "wren",
                    "timestamp": "2026-04-02T11:00:00Z"},
                   {"project": "triad", "tags": "", "type": "session_summary"}],
        embeddings=[[0.1] * 8, [0.2] * 8, [0.3] * 8],
    )
    other = client.get_or_create_collection("handoffs", embedding_function=None)
    other.add(ids=["h1"], documents=["Handoff: credentials rotated."], metadatas=[{"project": "ops"}],
              embeddings=[[0.5] * 8])
    del client


def test_import_chroma_store_then_serve_it(tmp_path, persmem_env, persmem_server):
    store = tmp_path / "chroma"
    write_persmem_style_store(store)
    env = persmem_env()
    run = subprocess.run([sys.executable, "-m", "persmem_core", "memory", "import-chroma", str(store)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "memories: imported 3" in run.stdout and "handoffs: imported 1" in run.stdout
    again = subprocess.run([sys.executable, "-m", "persmem_core", "memory", "import-chroma", str(store)],
                           env=env, capture_output=True, text=True, timeout=300)
    assert "imported 0, skipped 3 already present" in again.stdout

    server = persmem_server(agents=["kite"], env={"PERSMEM_HOME": env["PERSMEM_HOME"]})
    got = server.call_tool("memory_get", {"memory_id": "persmem-001"}, agent="kite")
    assert got["content"] == "Kite decided to use Maildir for AMQ." and got["author"] == "kite"
    assert got["tags"] == ["amq", "decision"] and got["type"] == "decision" and got["project"] == "triad"
    assert got["created"].startswith("2026-04-01T10:00:00")
    found = server.call_tool("memory_search", {"query": "dashboard timeline bug", "project": "dashboard"}, agent="kite")
    assert found["results"][0]["id"] == "persmem-002"
    assert server.call_tool("memory_stats", {"collection": "handoffs"}, agent="kite")["count"] == 1


def test_export_import_jsonl_round_trip(tmp_path, persmem_env):
    env = persmem_env()
    store = tmp_path / "chroma"
    write_persmem_style_store(store)
    subprocess.run([sys.executable, "-m", "persmem_core", "memory", "import-chroma", str(store)], env=env, check=True,
                   capture_output=True, timeout=300)
    dump = tmp_path / "dump.jsonl"
    subprocess.run([sys.executable, "-m", "persmem_core", "memory", "export", str(dump)], env=env, check=True,
                   capture_output=True, timeout=300)
    records = [json.loads(line) for line in dump.read_text().splitlines()]
    assert {r["id"] for r in records} == {"persmem-001", "persmem-002", "persmem-003", "h1"}
    turn = {"id": "turn-2", "content": "Yes, a sunrise over the lake.", "collection": "memories", "author": "kite",
            "context": "What did Melanie paint for the harbour exhibition?"}  # as a bulk store's export has it
    records.append(turn)
    dump.write_text(dump.read_text() + json.dumps(turn) + "\n")
    other = persmem_env(PERSMEM_HOME=str(tmp_path / "other-home"))
    loaded = subprocess.run([sys.executable, "-m", "persmem_core", "memory", "import", str(dump)], env=other,
                            capture_output=True, text=True, timeout=300)
    assert loaded.returncode == 0, loaded.stderr
    dump2 = tmp_path / "dump2.jsonl"
    subprocess.run([sys.executable, "-m", "persmem_core", "memory", "export", str(dump2)], env=other, check=True,
                   capture_output=True, timeout=300)
    again = [json.loads(line) for line in dump2.read_text().splitlines()]
    strip = lambda rs: sorted((r["id"], r["content"], r.get("context"), r.get("author"), tuple(r.get("tags", [])))  # noqa: E731
                              for r in rs)
    assert strip(records) == strip(again)
    assert {r["id"]: r["created"] for r in records if "created" in r} == {r["id"]: r["created"] for r in again
                                                                         if r["id"] != "turn-2"}


def test_import_chroma_refuses_a_folder_without_a_store(tmp_path, persmem_env):
    run = subprocess.run([sys.executable, "-m", "persmem_core", "memory", "import-chroma", str(tmp_path)],
                         env=persmem_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and "chroma.sqlite3 not found" in run.stderr

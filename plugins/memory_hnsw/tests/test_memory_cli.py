"""`persmem memory ...` while a real server owns the store (issue 15): the read-only commands (stats, export)
read the record logs and see the server's writes; the writing ones (import, import-chroma, reindex) are refused
with a message that names the running server and the way on. Times printed as ISO 8601, never epoch seconds."""

import json
import re
import subprocess

import pytest

from persmem_core.sdk.testing import clean_env, persmem_command, start_server

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3,6}Z$")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("cli-home")
    unusable = home.parent / "no-cache-here"
    unusable.write_text("a file, so no cache folder can be made under it")
    env = clean_env(home, XDG_CACHE_HOME=str(unusable))
    env.pop("PERSMEM_CACHE_DIR", None)  # no cache folder at all: the prepared model goes beside the collections
    running = start_server(home, agents=("kite",), env=env)
    yield running
    running.stop()


def cli(server, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(persmem_command("memory", *args), env=server.env, capture_output=True, text=True,
                          timeout=120)


def store(server, content: str, **extra) -> str:
    return server.call_tool("memory_store", {"content": content, "project": "cli", **extra}, agent="kite")["id"]


# -- read-only commands refused while a server runs ----------------------------------------------------------

def test_stats_works_while_the_server_runs_and_sees_its_writes(server):
    store(server, "The CLI reads the log while the server runs.", tags="cli")
    first = cli(server, "stats")
    assert first.returncode == 0, first.stderr
    stats = json.loads(first.stdout)
    assert stats["collection"] == "memories" and stats["projects"]["cli"] >= 1
    assert ISO.match(stats["oldest"]) and ISO.match(stats["newest"]), stats  # not epoch seconds
    store(server, "A second memory, written after the first stats.", memory_type="decision")
    again = json.loads(cli(server, "stats").stdout)
    assert again["count"] == stats["count"] + 1 and again["types"].get("decision") == 1
    assert server.call_tool("memory_stats", {}, agent="kite")["count"] == again["count"]  # the server is fine


def test_stats_of_a_misspelt_collection_names_the_closest(server):
    store(server, "Kept in its own collection.", collection="runbooks")
    refused = cli(server, "stats", "--collection", "runbook")
    assert refused.returncode == 1 and "did you mean 'runbooks'" in refused.stderr, refused.stderr


def test_the_models_folder_is_not_counted_as_a_collection(server):
    assert (server.home / "memory" / ".models").is_dir()  # the embedder's cache, next to the collections
    printed = cli(server, "stats").stdout
    names = [json.loads(block)["collection"] for block in re.split(r"(?m)^(?=\{)", printed) if block.strip()]
    assert ".models" not in names and "memories" in names
    doctor = subprocess.run(persmem_command("doctor"), env=server.env, capture_output=True, text=True, timeout=120)
    counted = re.search(r"memory store.*: (\d+) collection\(s\)", doctor.stdout)
    assert counted and int(counted.group(1)) == len(names), doctor.stdout


def test_export_works_while_the_server_runs_and_sees_its_writes(server, tmp_path):
    memory_id = store(server, "Exported while the server was running.")
    server.call_tool("memory_update", {"memory_id": memory_id, "content": "Exported, second version."},
                     agent="kite")
    dump = tmp_path / "dump.jsonl"
    result = cli(server, "export", str(dump))
    assert result.returncode == 0, result.stderr
    records = {r["id"]: r for r in map(json.loads, dump.read_text().splitlines())}
    record = records[memory_id]
    assert record["content"] == "Exported, second version." and record["version"] == 2
    assert record["history"][0]["content"] == "Exported while the server was running."
    assert ISO.match(record["created"]) and "created_ts" not in record and "content_hash" not in record
    deleted = store(server, "Deleted before the export.")
    server.call_tool("memory_delete", {"memory_id": deleted}, agent="kite")
    to_stdout = cli(server, "export", "-")
    assert deleted not in to_stdout.stdout and memory_id in to_stdout.stdout


# -- writing commands: refused clearly while a server runs ---------------------------------------------------

def test_import_while_the_server_runs_is_refused_naming_it_and_memory_bulk_store(server, tmp_path):
    dump = tmp_path / "in.jsonl"
    dump.write_text(json.dumps({"id": "imported-1", "content": "Imported later."}) + "\n")
    refused = cli(server, "import", str(dump))
    assert refused.returncode == 1
    message = refused.stderr
    assert "a persmem server is running on this store" in message and f"pid {server.process.pid}" in message
    assert "needs it stopped" in message and "memory_bulk_store" in message and "Traceback" not in message
    chroma = cli(server, "import-chroma", str(tmp_path))
    assert chroma.returncode == 1 and "a persmem server is running" in chroma.stderr


def test_reindex_while_the_server_runs_is_refused_naming_it(server):
    refused = cli(server, "reindex")
    assert refused.returncode == 1 and "a persmem server is running on this store" in refused.stderr
    assert "`persmem memory reindex` writes to the store and needs it stopped" in refused.stderr
    assert server.call_tool("memory_stats", {}, agent="kite")["count"] >= 1  # still serving

"""Inputs and failures that used to answer "internal error" (or a traceback), through a real server: each gets a
message naming the problem and the fix, and the server keeps serving. Grouped by attack class."""

import contextlib
import json
import subprocess
from pathlib import Path

import pytest

from persmem_core.sdk.testing import ToolCallError, clean_env, persmem_command, start_server, write_config


def assert_still_serving(server, agent="kite"):
    assert server.call_tool("persmem_whoami", {}, agent=agent)["agent"] == agent


# -- malformed memory_bulk_store chunks ---------------------------------------------------------------------

@pytest.mark.parametrize("bad_id", [[1], {"a": 1}, 7, 2.5, True])
def test_a_list_object_or_number_as_chunk_id_is_a_clear_error(shared_server, bad_id):
    chunks = json.dumps([{"content": "a fine chunk", "id": "fine-1"}, {"content": "x", "id": bad_id}])
    with pytest.raises(ToolCallError, match=r"chunks\[1\]\.id must be a string") as refused:
        shared_server.call_tool("memory_bulk_store", {"chunks": chunks, "project": "bad-ids"}, agent="kite")
    assert "internal error" not in str(refused.value)
    with pytest.raises(ToolCallError, match="no memory 'fine-1'"):  # all or nothing: the good chunk is not stored
        shared_server.call_tool("memory_get", {"memory_id": "fine-1"}, agent="kite")
    assert_still_serving(shared_server)


@pytest.mark.parametrize("field, value", [("tags", 5), ("tags", [["nested"]]), ("tags", {"a": "b"}),
                                          ("project", ["p"]), ("type", {"t": 1})])
def test_other_non_string_chunk_fields_are_clear_errors(shared_server, field, value):
    chunks = json.dumps([{"content": "x", field: value}])
    with pytest.raises(ToolCallError, match=rf"chunks\[0\]\.{field} must be a"):
        shared_server.call_tool("memory_bulk_store", {"chunks": chunks}, agent="kite")
    assert_still_serving(shared_server)


def test_deeply_nested_chunks_json_is_a_clear_error(shared_server):
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ToolCallError, match="nested too deeply.*flat JSON array"):
        shared_server.call_tool("memory_bulk_store", {"chunks": deep}, agent="kite")
    with pytest.raises(ToolCallError, match="nested too deeply"):
        shared_server.call_tool("memory_bulk_store", {"chunks": '[{"content": ' + deep + "}]"}, agent="kite")
    assert_still_serving(shared_server)


# -- a full disk ------------------------------------------------------------------------------------------

@contextlib.contextmanager
def tiny_filesystem(folder: Path, size: str):
    """A tmpfs of `size` mounted at `folder` (root only); skips the test where mounting is not possible."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(folder)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount rights): {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def fill(folder: Path) -> Path:
    """Write a file until the filesystem refuses more (ENOSPC); returns it, to free the space later."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        for block in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    f.write(b"\0" * block)
            except OSError as exc:
                assert exc.errno == 28, exc
    return filler


def test_disk_full_on_memory_store_is_a_clear_error_and_nothing_acknowledged_is_lost(tmp_path):
    home = tmp_path / "home"
    collection = home / "memory" / "memories"
    big = "A note long enough to need fresh pages on the disk. " * 120  # ~6 KB: more than any partial page
    with tiny_filesystem(collection, "1m"):
        server = start_server(home, agents=("kite",))
        try:
            kept = [server.call_tool("memory_store", {"content": f"Kept fact {i}: the gate code is {i}{i}{i}.",
                                                      "project": "disk"}, agent="kite")["id"] for i in range(3)]
            filler = fill(collection)
            for tool, args in [("memory_store", {"content": "Lost " + big, "project": "disk"}),
                               ("memory_bulk_store", {"chunks": json.dumps([{"content": "Lost too " + big}])}),
                               ("memory_update", {"memory_id": kept[0], "content": "Changed " + big})]:
                with pytest.raises(ToolCallError) as refused:
                    server.call_tool(tool, args, agent="kite")
                message = str(refused.value)
                assert f"mounted at {collection}) is full: nothing was stored or changed" in message, message
                assert "Free some space" in message and "internal error" not in message
            assert_still_serving(server)

            filler.unlink()  # space freed: the same server stores again, and what it acknowledged is intact
            after = server.call_tool("memory_store", {"content": "Stored after the disk had room again.",
                                                      "project": "disk"}, agent="kite")
            assert after["status"] == "stored"
            for i, memory_id in enumerate(kept):
                memory = server.call_tool("memory_get", {"memory_id": memory_id}, agent="kite")
                assert memory["content"] == f"Kept fact {i}: the gate code is {i}{i}{i}." and memory["version"] == 1
            assert server.call_tool("memory_stats", {}, agent="kite")["count"] == 4

            filler = fill(collection)  # stopped on a full disk: the index cannot be saved whole
            server.stop()
            filler.unlink()
            server.start()
            for i, memory_id in enumerate(kept):  # each is in the rebuilt index, found by its meaning
                found = server.call_tool("memory_search", {"query": f"the gate code is {i}{i}{i}", "project": "disk",
                                                           "mode": "dense", "top_k": 5}, agent="kite")
                assert memory_id in {r["id"] for r in found["results"]}
            found = server.call_tool("memory_search", {"query": "stored after the disk had room again",
                                                       "project": "disk", "mode": "dense"}, agent="kite")
            assert found["results"][0]["id"] == after["id"]
        finally:
            server.stop()
    assert not any(p.name.endswith((".tmp", ".compact")) for p in collection.iterdir())


# -- a model that fails to load -----------------------------------------------------------------------------

def test_a_model_that_fails_to_load_gives_a_short_clear_error(tmp_path):
    from persmem_memory_hnsw.embedding.embedder import default_model_files

    model_dir = tmp_path / "installed-models" / "broken"
    model_dir.mkdir(parents=True)
    (model_dir / "model.onnx").write_bytes(b"this is not an ONNX model")
    (model_dir / "tokenizer.json").write_bytes(default_model_files().tokenizer.read_bytes())
    home = tmp_path / "home"
    write_config(home, {"memory": {"model_dir": str(model_dir)}})
    server = start_server(home, agents=("kite",))
    try:
        for tool, args in [("memory_store", {"content": "anything"}), ("memory_search", {"query": "anything"})]:
            with pytest.raises(ToolCallError) as refused:
                server.call_tool(tool, args, agent="kite")
            message = str(refused.value)
            assert "the embedding model failed to load" in message and "`persmem doctor`" in message
            assert str(tmp_path) not in message and "Traceback" not in message and "site-packages" not in message
            assert len(message) < 300, message
        assert_still_serving(server)
        assert str(model_dir / "model.onnx") in server.log()  # the details are in the server log
        doctor = subprocess.run(persmem_command("doctor"), env=clean_env(home), capture_output=True, text=True)
        assert "FAIL  memory embedding model" in doctor.stdout, doctor.stdout
    finally:
        server.stop()


def test_the_doctor_passes_a_model_that_loads(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    doctor = subprocess.run(persmem_command("doctor"), env=clean_env(home), capture_output=True, text=True)
    assert "PASS  memory embedding model" in doctor.stdout, doctor.stdout + doctor.stderr

"""Crash safety and corruption: kill -9 at random moments, torn tails, flipped bytes, a damaged index."""

import hashlib
import json
import os
import random
import time

import numpy as np
import pytest

from persmem_core.sdk import Sealer, UserError
from persmem_core.sdk.testing import key_id
from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files
from persmem_memory_hnsw.store.query import Filters


@pytest.fixture(scope="module")
def embedder():
    return OnnxEmbedder(default_model_files()).load()


def open_collection(folder, embedder, sealer=None, **cfg):
    return Collection("memories", folder, embedder, MemoryConfig(**cfg), sealer).open()


def test_kill_9_sweep_loses_nothing_acknowledged(tmp_path, embedder, killed_after):
    """A writer is SIGKILLed at random moments; after each kill, every acknowledged write is present."""
    folder = tmp_path / "memories"
    rng = random.Random(7)
    expected: dict[str, str] = {}  # id -> "present" | "deleted"
    updated: dict[str, int] = {}
    start, kills, deadline = 0, 0, time.monotonic() + 90
    while time.monotonic() < deadline and kills < 40:
        for line in killed_after("writer_for_kill.py", folder, start, rng.uniform(0.05, 0.6)):
            kind, memory_id, *rest = line.split()
            if kind == "S":
                expected[memory_id] = "present"
            elif kind == "d":  # a delete began: until it is acknowledged, either outcome is correct
                expected[memory_id] = "either"
            elif kind == "D":
                expected[memory_id] = "deleted"
            elif kind == "u":
                updated.pop(memory_id, None)  # an update began: old or new content are both correct
            elif kind == "U":
                updated[memory_id] = int(rest[0])
        kills += 1
        col = open_collection(folder, embedder)
        for memory_id, state in expected.items():
            if state == "present":
                assert memory_id in col.memories, f"acknowledged {memory_id} lost after kill {kills}"
            elif state == "deleted":
                assert memory_id not in col.memories, f"deleted {memory_id} came back after kill {kills}"
            elif memory_id not in col.memories:
                expected[memory_id] = "deleted"  # the in-flight delete landed; it must stay deleted
        for memory_id, n in updated.items():
            if expected.get(memory_id) == "present":
                assert col.get(memory_id).content.startswith(f"updated note number {n}")
        hits = col.search("note about topic 3", top_k=5, filters=Filters(project="p"))
        assert all(h.memory.id in col.memories for h in hits)
        assert col.vectors.live == sum(len(m.labels) for m in col.memories.values())
        col.close()
        start = max([int(i[1:]) for i in expected] + [start]) + 1
    assert kills >= 10 and len(expected) > 50


def store_some(col, n=30, project="p", start=0):
    items = [NewMemory(content=f"fact {i}: the {['red', 'green', 'blue'][i % 3]} server number {i}", project=project,
                       type="note", tags=[f"t{i % 4}"], memory_id=f"m{i}") for i in range(start, start + n)]
    return col.store(items, author="kite", dedup=False)


def test_torn_tail_is_cut_and_the_store_opens(tmp_path, embedder):
    folder = tmp_path / "c"
    col = open_collection(folder, embedder)
    store_some(col)
    col.close()
    log_path = folder / "records.log"
    with open(log_path, "ab") as f:
        f.write(b"\x10\x00\x00\x00garbage-that-is-a-torn-frame")
    col = open_collection(folder, embedder)
    assert len(col.memories) == 30
    assert list(folder.glob("records.log.torn-*")), "the torn bytes are kept aside for inspection"
    store_some(col, n=5, start=30)  # appending after the cut works
    col.close()
    assert len(open_collection(folder, embedder).memories) == 35


def test_flipped_byte_in_the_log_loses_only_entries_after_it(tmp_path, embedder):
    folder = tmp_path / "c"
    col = open_collection(folder, embedder)
    store_some(col, n=10)
    size_after_10 = col.log.size
    store_some(col, n=20, start=10)
    col.close()
    data = bytearray((folder / "records.log").read_bytes())
    data[size_after_10 + 40] ^= 0xFF
    (folder / "records.log").write_bytes(bytes(data))
    col = open_collection(folder, embedder)
    assert set(col.memories) == {f"m{i}" for i in range(10)}


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "meta", "cut-by-full-disk"])
def test_damaged_index_is_detected_and_rebuilt_not_loaded(tmp_path, embedder, damage, sealed):
    """Plain or sealed (a sealed index is checked against its sidecar in the pass that opens it): a damaged
    index file is rebuilt from the log, never loaded, never an error."""
    key = os.urandom(32)
    sealer = Sealer({key_id(key): key}, key_id(key), True) if sealed else None
    folder = tmp_path / "c"
    col = open_collection(folder, embedder, sealer)
    store_some(col)
    col.close()
    index = folder / "vectors.hnsw"
    if damage == "flip":
        data = bytearray(index.read_bytes())
        data[len(data) // 2] ^= 0xFF
        index.write_bytes(bytes(data))
    elif damage == "truncate":
        index.write_bytes(index.read_bytes()[:100])
    elif damage == "delete":
        index.unlink()
    elif damage == "cut-by-full-disk":  # hnswlib reports no write error: the sidecar vouches for a cut file
        index.write_bytes(index.read_bytes()[: index.stat().st_size // 2])
        meta = folder / "vectors.hnsw.meta.json"
        recorded = json.loads(meta.read_text())
        meta.write_text(json.dumps(recorded | {"sha256": hashlib.sha256(index.read_bytes()).hexdigest()}))
    else:
        (folder / "vectors.hnsw.meta.json").write_text("{not json")
    col = open_collection(folder, embedder, sealer)
    hits = col.search("green server", top_k=3, filters=Filters(), mode="dense")
    assert hits and "green" in hits[0].memory.content
    assert col.vectors.live == 30


def test_updates_and_deletes_do_not_grow_disk_without_bound(tmp_path, embedder):
    folder = tmp_path / "c"
    col = open_collection(folder, embedder)
    store_some(col, n=20)
    for round_ in range(40):
        for i in range(20):
            col.update(f"m{i}", editor="kite", editors={},
                       content=f"fact {i} revision {round_} with some padding text " * 3)
    log_size = (folder / "records.log").stat().st_size
    index_cap = col.vectors.index.get_max_elements()
    assert log_size < 3_000_000, "the log is compacted"
    assert index_cap <= 4096, "deleted slots are reused"
    col.close()
    col = open_collection(folder, embedder)
    assert col.memories["m5"].version == 41 and "revision 39" in col.get("m5").content
    assert len(col.get("m5").history) == 40


def test_another_model_is_refused_until_reindex(tmp_path, embedder):
    folder = tmp_path / "c"
    col = open_collection(folder, embedder)
    store_some(col, n=5)
    col.close()

    class OtherModel:
        model_id, dim = "some-other-model", embedder.dim

        def load(self):
            return self

        def embed_chunks(self, texts):
            return [np.ones((1, self.dim), dtype=np.float32) / np.sqrt(self.dim) for _ in texts]

    from persmem_core.sdk import UserError

    with pytest.raises(UserError, match="reindex"):
        Collection("memories", folder, OtherModel(), MemoryConfig()).open()
    col = Collection("memories", folder, OtherModel(), MemoryConfig()).open(reindex=True)
    assert len(col.memories) == 5
    col.close()
    Collection("memories", folder, OtherModel(), MemoryConfig()).open().close()


def test_failed_write_reports_failure_and_leaves_nothing(tmp_path, embedder, monkeypatch):
    folder = tmp_path / "c"
    col = open_collection(folder, embedder)
    store_some(col, n=3)
    real_fsync = os.fsync

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(UserError, match="is full: nothing was stored"):
        col.store([NewMemory(content="will not be stored", project="p", type="note", tags=[], memory_id="nope")],
                  author="kite")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert "nope" not in col.memories
    col.close()
    reopened = open_collection(folder, embedder)
    assert "nope" not in reopened.memories and len(reopened.memories) == 3


def test_compaction_copies_entries_exactly_and_search_stays_exact(tmp_path, embedder):
    """Texts and float32 vectors live in the log, not in memory: updates that keep the text reuse the logged
    vectors, compaction copies entries byte for byte, and an exact (filtered) search ranks like float32 math."""
    folder = tmp_path / "c"
    col = open_collection(folder, embedder)
    store_some(col, n=20)
    original = {f"m{i}": col.logged_vectors(f"m{i}").copy() for i in range(20)}
    written = 0
    for round_ in range(60):
        for i in range(20):
            col.update(f"m{i}", editor="kite", editors={}, tags=[f"round-{round_}", "x" * 60])
            written += col.rows.span_bytes(f"m{i}")
    assert col.log.size < written / 2, "the log was compacted"
    col.close()
    col = open_collection(folder, embedder)
    for memory_id, vectors in original.items():
        assert np.array_equal(col.logged_vectors(memory_id), vectors), memory_id
    assert col.get("m3").version == 61 and col.get("m3").tags == ["round-59", "x" * 60]
    again = col.store([NewMemory(content=col.get("m3").content, project=col.get("m3").project, type="note", tags=[])],
                      author="kite")
    assert again == [{"status": "duplicate", "id": "m3", "match": "exact"}]

    project = col.get("m0").project
    members = [m for m in col.memories.values() if m.project == project]
    for query in ("green server", "backup schedule", "a cat"):
        q = embedder.embed_query(query)
        truth = max(members, key=lambda m: float(original[m.id][0] @ q)).id
        hits = col.search(query, top_k=3, filters=Filters(project=project), mode="dense")
        assert hits[0].memory.id == truth and all(h.memory.project == project for h in hits)
    col.close()


def test_bulk_context_is_in_the_log_and_indexed_again_after_reopening(tmp_path, embedder):
    folder = tmp_path / "memories"
    col = open_collection(folder, embedder)
    col.store([NewMemory(content="A sunrise over the lake.", project="p", type="note", tags=[], memory_id="answer",
                         context="What did you paint for the harbour exhibition?")], author="kite")
    col.update("answer", editor="kite", editors={}, content="A sunrise over the lake, in oils.")  # keeps its context
    col.close()
    col = open_collection(folder, embedder)
    hits = col.search("harbour exhibition", top_k=3, filters=Filters(), mode="lexical")
    assert [h.memory.id for h in hits] == ["answer"] and hits[0].memory.content.endswith("in oils.")
    col.close()


def _dense_score(col, text, memory_id):
    hits = col.search(text, top_k=5, filters=Filters(), mode="dense")
    return next((h.dense for h in hits if h.memory.id == memory_id), None)


def test_updates_keep_their_labels_so_the_index_does_not_grow(tmp_path, embedder):
    col = open_collection(tmp_path / "memories", embedder)
    col.store([NewMemory(content="The deploy window is Tuesday morning.", project="p", type="note", tags=[],
                         memory_id="window"),
               NewMemory(content="Lunch is at noon.", project="p", type="note", tags=[], memory_id="lunch")],
              author="kite")
    labels, graph = col.next_label, col.vectors.index.get_current_count()
    days = ["Monday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    for i in range(24):
        col.update("window", editor="kite", editors={},
                   content=f"The deploy window is {days[i % 6]} at {i}:00, cleared by ops.")
    assert (col.next_label, col.vectors.index.get_current_count()) == (labels, graph)
    final = "The deploy window is Sunday at 23:00, cleared by ops."
    assert _dense_score(col, final, "window") > 0.999
    assert _dense_score(col, "The deploy window is Tuesday morning.", "window") < 0.95  # the old vector is gone
    col.close()
    col = open_collection(tmp_path / "memories", embedder)
    assert _dense_score(col, final, "window") > 0.999
    col.close()


def test_a_crash_after_an_update_replays_it_into_the_same_graph_slot(tmp_path, embedder):
    """The saved index holds a deleted slot; an update logged after the save is replayed on open and must
    replace the live label's vector, not put the label into the deleted slot next to its old vector."""
    folder = tmp_path / "memories"
    col = open_collection(folder, embedder)
    col.store([NewMemory(content=text, project="p", type="note", tags=[], memory_id=name) for name, text in
               (("a", "Backups run nightly at two."), ("b", "The office plant needs water on Fridays."),
                ("c", "The VPN certificate expires in March."))], author="kite")
    col.delete("b", by="kite", editors={})
    col.save_index()
    col.update("c", editor="kite", editors={}, tags=["vpn"])  # same text, same labels
    col.update("a", editor="kite", editors={}, content="Backups moved to hourly snapshots.")
    col.log.close()  # a crash: the index file was not saved again
    col = open_collection(folder, embedder)
    assert col.vectors.index.get_current_count() == 3  # a's and c's slots and b's deleted one, nothing more
    assert _dense_score(col, "Backups moved to hourly snapshots.", "a") > 0.999
    assert _dense_score(col, "Backups run nightly at two.", "a") < 0.95
    assert _dense_score(col, "The VPN certificate expires in March.", "c") > 0.999
    col.close()

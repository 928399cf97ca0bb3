"""The checkpoint (checkpoint.py): a restart loads it and replays only the log after it, and ends in exactly the
state a replay of the whole log gives; anything that does not fit (damaged, another log, sealed under another
key's rules) falls back to the whole replay."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from persmem_memory_hnsw.store import checkpoint, checkpoint_load, checkpoint_save
from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files
from persmem_memory_hnsw.store.lexical import BM25Index
from persmem_memory_hnsw.store.query import Filters
from persmem_memory_hnsw.store.rows import Rows


@pytest.fixture(scope="module")
def embedder():
    return OnnxEmbedder(default_model_files()).load()




def open_checkpointed(folder, embedder, sealer=None, **cfg):
    return Collection("memories", folder, embedder, MemoryConfig(**cfg), sealer).open()


def open_replayed(folder, embedder, sealer=None):
    """The same collection by a whole replay (the checkpoint moved aside for it, then put back)."""
    aside = [(p, p.with_name(p.name + ".aside"))
             for p in (folder / "checkpoint.bin", folder / "checkpoint.bin.meta.json") if p.exists()]
    for path, moved in aside:
        os.replace(path, moved)
    try:
        return Collection("memories", folder, embedder, MemoryConfig(), sealer).open()
    finally:
        for path, moved in aside:
            os.replace(moved, path)


def build(col, n=60):
    """Stores, updates (same and new text), deletes, tags, links, an unlink and feedback."""
    items = [NewMemory(content=f"fact {i}: the {['red', 'green', 'blue'][i % 3]} server number {i} runs "
                               f"{['postgres', 'redis', 'nginx', 'kafka'][i % 4]}",
                       project=f"p{i % 3}", type="note", tags=[f"t{i % 4}", "shared"], memory_id=f"m{i}")
             for i in range(n)]
    col.store(items, author="kite", dedup=False)
    for i in range(0, n, 7):
        col.update(f"m{i}", editor="kite", editors={}, tags=[f"t{i % 4}", "edited"])
    for i in range(1, n, 9):
        col.update(f"m{i}", editor="kite", editors={}, content=f"rewritten fact {i} about the violet cluster")
    for i in range(2, n, 11):
        col.delete(f"m{i}", by="kite", editors={})
    col.store([NewMemory(content="the blue server now runs mysql instead", project="p0", type="note", tags=[],
                         memory_id="newer", supersedes=["m3", "m5"])], author="kite", dedup=False)
    col.unlink("newer", supersedes_id="m5", by="kite", editors={})
    col.validate("m4", by="wren", helpful=True, note="right")
    col.store([NewMemory(content="wren's own note about the kafka lag", project="p1", type="note", tags=["t1"])],
              author="wren", dedup=False)


def assert_same_rows(a: Rows, b: Rows) -> None:
    """Field by field: every attribute of Rows (and of its BM25 index) equal, arrays over the rows in use."""
    assert set(vars(a)) == set(vars(b))
    n = len(a)
    assert len(b) == n
    for name, value in vars(a).items():
        other = getattr(b, name)
        if name == "lexical":
            continue
        if isinstance(value, np.ndarray):
            used = a.next_label if name == "label_row" else n
            assert np.array_equal(value[:used], other[:used]), name
        elif name in ("projects", "types", "authors"):
            assert value.code == other.code, name
        else:
            assert value == other, name
    assert list(a.heads) == list(b.heads)  # the same order too
    la, lb = a.lexical, b.lexical
    la.merge()
    lb.merge()
    for name, value in vars(la).items():
        if name == "analyzer":
            continue
        other = getattr(lb, name)
        if isinstance(value, np.ndarray):
            assert np.array_equal(value, other), name
        else:
            assert value == other, name


def assert_same_collection(a: Collection, b: Collection) -> None:
    assert_same_rows(a.rows, b.rows)
    assert a.log.size == b.log.size
    # dead_bytes as counted live (carried by the checkpoint) leaves out the delete frames themselves, which a
    # replay counts (Collection.delete): the same but for those few bytes
    assert abs(a.log.dead_bytes - b.log.dead_bytes) <= 0.02 * b.log.dead_bytes
    labels = a.rows.next_label
    assert np.array_equal(a.vectors._q[:labels], b.vectors._q[:labels])
    assert np.array_equal(a.vectors._scale[:labels], b.vectors._scale[:labels])
    for query, filters in (("green server postgres", Filters()), ("violet cluster", Filters(project="p1")),
                           ("kafka", Filters(tags=["t1"])), ("mysql", Filters(author="kite"))):
        for mode in ("hybrid", "lexical", "dense"):
            hits_a = a.search(query, top_k=10, filters=filters, mode=mode)
            hits_b = b.search(query, top_k=10, filters=filters, mode=mode)
            assert [(h.memory.id, h.score, h.lexical, h.dense, h.restated_by) for h in hits_a] == \
                   [(h.memory.id, h.score, h.lexical, h.dense, h.restated_by) for h in hits_b], (query, mode)
    for memory_id in ("m3", "m5", "newer", "m4"):
        assert a.lifecycle_of(memory_id, now=1.0) == b.lifecycle_of(memory_id, now=1.0)


def test_every_attribute_of_rows_and_bm25_is_carried():
    """Adding an attribute to Rows or BM25Index without carrying it in the checkpoint fails here."""
    assert set(vars(Rows())) == set(checkpoint.ROWS_SAVED + checkpoint.ROWS_DERIVED + checkpoint.ROWS_ARRAYS
                                    + checkpoint.ROWS_NESTED)
    assert set(vars(BM25Index())) == set(checkpoint.BM25_SAVED + checkpoint.BM25_ARRAYS + checkpoint.BM25_DERIVED
                                         + checkpoint.BM25_FRESH)
    assert set(checkpoint.State.__struct_fields__) >= {name.lstrip("_") for name in checkpoint.ROWS_SAVED} - {"by_hash"}


def test_restart_from_the_checkpoint_equals_a_whole_replay(tmp_path, embedder):
    folder = tmp_path / "memories"
    col = open_checkpointed(folder, embedder)
    build(col)
    col.close()
    assert (folder / "checkpoint.bin").exists()
    fast = open_checkpointed(folder, embedder)
    assert fast.opened.from_checkpoint and fast.opened.tail_entries == 0
    slow = open_replayed(folder, embedder)
    assert_same_collection(fast, slow)


def test_writes_after_the_checkpoint_are_replayed_from_the_log(tmp_path, embedder):
    folder = tmp_path / "memories"
    col = open_checkpointed(folder, embedder)
    build(col)
    col.close()
    col = open_checkpointed(folder, embedder)
    col.store([NewMemory(content=f"tail fact {i} about the amber router", project="p0", type="note", tags=["tail"],
                         memory_id=f"tail{i}") for i in range(5)], author="kite", dedup=False)
    col.update("m8", editor="kite", editors={}, content="the amber router replaced server 8")
    col.delete("m10", by="kite", editors={})
    # killed: no close, no save (the checkpoint is older than the log)
    fast = open_checkpointed(folder, embedder)
    assert fast.opened.from_checkpoint and fast.opened.tail_entries == 7
    assert {f"tail{i}" for i in range(5)} <= set(fast.memories) and "m10" not in fast.memories
    assert fast.search("router replaced", top_k=3, filters=Filters(), mode="lexical")[0].memory.id == "m8"
    assert_same_collection(fast, open_replayed(folder, embedder))


def test_the_log_keeps_its_crc_as_it_is_written_so_a_save_reads_nothing_back(tmp_path, embedder, monkeypatch):
    """Issue 36: the CRC a checkpoint vouches for the log with is kept up to date as frames are written (from the
    one an open checked, or from zero), through stores, a compaction and a reopen; a save does not read the log."""
    folder = tmp_path / "memories"
    col = open_checkpointed(folder, embedder)
    build(col)
    assert col.log.crc == checkpoint.prefix_crc(col.log.path, col.log.size)

    def no_reading(*args):
        raise AssertionError("the save read the log back for its CRC")

    monkeypatch.setattr(checkpoint_save, "prefix_crc", no_reading)
    col.save_index()
    meta = json.loads(checkpoint.meta_path(checkpoint.checkpoint_path(folder)).read_text())
    assert meta["log_offset"] == col.log.size and meta["log_crc32"] == col.log.crc
    col.close()
    again = open_checkpointed(folder, embedder)  # from the checkpoint: the CRC goes on from the checked one
    assert again.opened.from_checkpoint
    again.store([NewMemory(content=f"after the reopen {i}", project="p0", type="note", tags=[]) for i in range(3)],
                author="kite", dedup=False)
    assert again.log.crc == checkpoint.prefix_crc(again.log.path, again.log.size)
    again.compact()  # the log rewritten: its CRC is the new file's
    assert again.log.crc == checkpoint.prefix_crc(again.log.path, again.log.size)
    monkeypatch.undo()


@pytest.mark.parametrize("damage", ["flip", "cut", "cut-with-checksum", "sidecar", "other-model", "format"])
def test_a_damaged_or_foreign_checkpoint_is_ignored(tmp_path, embedder, damage):
    folder = tmp_path / "memories"
    col = open_checkpointed(folder, embedder)
    build(col)
    col.close()
    path, meta = folder / "checkpoint.bin", folder / "checkpoint.bin.meta.json"
    data = bytearray(path.read_bytes())
    recorded = json.loads(meta.read_text())
    if damage == "flip":
        data[len(data) // 3] ^= 0x01
        path.write_bytes(bytes(data))
    elif damage == "cut":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "cut-with-checksum":  # vouched for, but does not decode
        import hashlib

        path.write_bytes(bytes(data[:200]))
        meta.write_text(json.dumps(recorded | {"sha256": hashlib.sha256(bytes(data[:200])).hexdigest()}))
    elif damage == "sidecar":
        meta.write_text("{not json")
    elif damage == "other-model":
        meta.write_text(json.dumps(recorded | {"model_id": "another-model"}))
    else:
        meta.write_text(json.dumps(recorded | {"format": checkpoint.FORMAT + 1}))
    fast = open_checkpointed(folder, embedder)
    assert not fast.opened.from_checkpoint
    assert_same_collection(fast, open_replayed(folder, embedder))
    fast.close()
    assert open_checkpointed(folder, embedder).opened.from_checkpoint, "a new checkpoint was saved after the replay"


def test_a_compaction_never_leaves_a_stale_checkpoint(tmp_path, embedder):
    folder = tmp_path / "memories"
    col = open_checkpointed(folder, embedder)
    build(col)
    col.save_index()
    stale = {p.name: p.read_bytes() for p in folder.glob("checkpoint.bin*")}
    for round_ in range(3):
        for i in range(20):
            if f"m{i}" in col.memories:
                col.update(f"m{i}", editor="kite", editors={}, tags=[f"round-{round_}"])
    col.compact()  # drops the checkpoint before the log is replaced, and saves none of these rows
    assert not list(folder.glob("checkpoint.bin*"))
    col.store([NewMemory(content="written after the compaction", project="p0", type="note", tags=[],
                         memory_id="late")], author="kite", dedup=False)
    col.save_index()
    assert not list(folder.glob("checkpoint.bin*")), "the compacted rows keep dead rows a replay does not have"
    # killed here: the next open replays the whole (compacted) log
    after = open_checkpointed(folder, embedder)
    assert not after.opened.from_checkpoint and "late" in after.memories
    assert_same_collection(after, open_replayed(folder, embedder))
    assert len(after.rows) == len(after.memories), "no dead rows after a replay of the compacted log"
    # a crash that kept the old checkpoint (the drop lost): its frames are not this log's, so it is not used
    for name in list(stale):
        (folder / name).write_bytes(stale[name])
    again = open_checkpointed(folder, embedder)
    assert not again.opened.from_checkpoint
    assert_same_collection(again, open_replayed(folder, embedder))


def test_a_reindex_drops_the_checkpoint_and_the_next_open_saves_one(tmp_path, embedder):
    folder = tmp_path / "memories"
    col = open_checkpointed(folder, embedder)
    build(col, n=20)
    col.close()
    col = Collection("memories", folder, embedder, MemoryConfig()).open(reindex=True)
    assert not list(folder.glob("checkpoint.bin*"))
    col.close()
    col = open_checkpointed(folder, embedder)
    assert not col.opened.from_checkpoint and (folder / "checkpoint.bin").exists()
    col.close()
    fast = open_checkpointed(folder, embedder)
    assert fast.opened.from_checkpoint
    assert_same_collection(fast, open_replayed(folder, embedder))


def _sealer():
    from persmem_core.sdk.testing import key_id
    from persmem_core.sdk import Sealer

    key = os.urandom(32)
    return Sealer({key_id(key): key}, key_id(key), True)


def test_a_sealed_checkpoint_holds_no_plaintext(tmp_path, embedder):
    from persmem_core.sdk import SealingError, is_sealed

    words = [b"quokka", b"periwinkl", b"shared", b"violet"]  # stemmed terms of a text, a tag
    plain_folder = tmp_path / "plain"
    col = open_checkpointed(plain_folder, embedder)
    build(col, n=20)
    col.store([NewMemory(content="the periwinkle quokka audits the ledger", project="p0", type="note",
                         tags=["shared"])], author="kite", dedup=False)
    col.close()
    stored = (plain_folder / "checkpoint.bin").read_bytes()
    assert all(word in stored for word in words), "a plaintext checkpoint holds them (so the check below means it)"

    sealer = _sealer()
    folder = tmp_path / "sealed"
    col = open_checkpointed(folder, embedder, sealer)
    build(col, n=20)
    col.store([NewMemory(content="the periwinkle quokka audits the ledger", project="p0", type="note",
                         tags=["shared"])], author="kite", dedup=False)
    col.close()
    stored = (folder / "checkpoint.bin").read_bytes()
    assert is_sealed(stored)
    for path in folder.iterdir():  # no plaintext in any file: checkpoint, its sidecar, temp files
        assert not any(word in path.read_bytes() for word in words), path.name
    fast = open_checkpointed(folder, embedder, sealer)
    assert fast.opened.from_checkpoint
    assert fast.search("periwinkle quokka", top_k=1, filters=Filters(), mode="lexical")[0].memory.content.startswith(
        "the periwinkle")
    assert_same_collection(fast, open_replayed(folder, embedder, sealer))
    fast.close()
    with pytest.raises(SealingError, match="checkpoint.bin"):  # another key: stopped, never replayed over
        checkpoint_load.load(folder, Rows(), fast.vectors, folder / "records.log", model_id=embedder.model_id,
                             sealer=_sealer())


def test_key_migrate_drops_a_checkpoint_the_log_reseal_invalidates(tmp_path, embedder):
    from persmem_memory_hnsw.reseal import reseal_store

    store = tmp_path / "memory"
    col = open_checkpointed(store / "memories", embedder)
    build(col, n=20)
    col.close()
    sealer = _sealer()
    counted = reseal_store(store, MemoryConfig(), sealer, lambda *a: None, dry_run=True)
    assert (store / "memories" / "checkpoint.bin").exists()
    reseal_store(store, MemoryConfig(), sealer, lambda *a: None, dry_run=False)
    assert counted.rewritten >= 2
    assert not list((store / "memories").glob("checkpoint.bin*"))
    col = open_checkpointed(store / "memories", embedder, sealer)  # replays the resealed log, saves a sealed one
    assert not col.opened.from_checkpoint
    col.close()
    again = reseal_store(store, MemoryConfig(), sealer, lambda *a: None, dry_run=True)
    assert again.rewritten == 0, "a checkpoint sealed under the current key, of a sealed log, stays"
    assert open_checkpointed(store / "memories", embedder, sealer).opened.from_checkpoint


SAVER = """
import sys
from pathlib import Path
from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files
from persmem_memory_hnsw.store.replay import save_checkpoint
folder = Path(sys.argv[1])
col = Collection("memories", folder, OnnxEmbedder(default_model_files()), MemoryConfig()).open()
print("ready", flush=True)
i = 0
while True:
    col.store([NewMemory(content=f"saver note {i} about the saffron tower", project="p", type="note", tags=[])],
              author="kite", dedup=False)
    save_checkpoint(folder, col.log, col.rows, col.vectors, col.embedder.model_id)
    i += 1
"""


def test_kill_9_during_checkpoint_saves_leaves_a_store_that_opens_right(tmp_path, embedder):
    folder = tmp_path / "memories"
    col = open_checkpointed(folder, embedder)
    build(col, n=300)
    col.close()
    rng = random.Random(3)
    used = 0
    for _ in range(6):
        proc = subprocess.Popen([sys.executable, "-c", SAVER, str(folder)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.05, 0.5))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        fast = open_checkpointed(folder, embedder)
        used += fast.opened.from_checkpoint
        assert_same_collection(fast, open_replayed(folder, embedder))
        fast.log.close()
    assert used, "some kill left a checkpoint that was used"


def test_a_checkpoint_from_before_the_per_author_statistics_counts_them_on_load(tmp_path, embedder):
    """A checkpoint written before BM25 kept statistics per author (issue 32) has none: they are counted from its
    rows on load, to what a whole replay gives."""
    import hashlib

    import msgspec

    folder = tmp_path / "memories"
    col = open_checkpointed(folder, embedder)
    build(col)
    col.close()
    path, meta = folder / "checkpoint.bin", folder / "checkpoint.bin.meta.json"
    data = path.read_bytes()
    (length,) = checkpoint.LENGTH.unpack_from(data, len(checkpoint.MAGIC))
    start = len(checkpoint.MAGIC) + checkpoint.LENGTH.size
    state = msgspec.msgpack.decode(data[start:start + length])
    assert set(state["scope_alive"]) and state.pop("scope_alive") and state.pop("scope_len")
    encoded = msgspec.msgpack.encode(state)
    path.write_bytes(checkpoint.MAGIC + checkpoint.LENGTH.pack(len(encoded)) + encoded + data[start + length:])
    recorded = json.loads(meta.read_text())
    recorded["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    meta.write_text(json.dumps(recorded))
    fast = open_checkpointed(folder, embedder)
    assert fast.opened.from_checkpoint
    slow = open_replayed(folder, embedder)
    a, b = fast.rows.lexical, slow.rows.lexical
    assert a._scope == b._scope and a.scope_alive == b.scope_alive and len(a.scope_alive) == 2  # kite, wren
    assert a.scope_len == pytest.approx(b.scope_len, rel=1e-6)
    for author in ("kite", "wren"):
        scope = fast.rows.authors.code[author]
        assert fast.rows.lexical.scores("server postgres kafka", len(fast.rows), scope)[1] == \
            pytest.approx(slow.rows.lexical.scores("server postgres kafka", len(slow.rows), scope)[1], rel=1e-5)

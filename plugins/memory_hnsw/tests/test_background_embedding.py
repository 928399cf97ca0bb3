"""Stores acknowledged once logged and fsynced, embedded afterwards: kill -9 between the acknowledgement and the
embedding loses nothing and leaves nothing unsearchable; keyword search finds a store at once, meaning once it is
embedded; searches wait (boundedly) for what was stored before them; concurrent writers share fsyncs; near
duplicates are still turned away before the vector exists."""

import os
import random
import threading
import time

import pytest

from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files
from persmem_memory_hnsw.embedding.background import BackgroundEmbedder
from persmem_memory_hnsw.store.query import Filters


@pytest.fixture(scope="module")
def embedder():
    return OnnxEmbedder(default_model_files()).load()


def note(text: str, memory_id: str | None = None, **kw) -> NewMemory:
    return NewMemory(content=text, project=kw.pop("project", "p"), type=kw.pop("type", "note"), tags=[],
                     memory_id=memory_id, **kw)


def dense_ids(col: Collection, query: str, k: int = 5) -> list[str]:
    return [hit.memory.id for hit in col.search(query, top_k=k, filters=Filters(), mode="dense")]


def test_store_is_acknowledged_before_it_is_embedded_and_found_by_keyword_at_once(tmp_path, embedder):
    embedding = BackgroundEmbedder()  # not started: nothing gets embedded until it is
    col = Collection("memories", tmp_path / "c", embedder, MemoryConfig(search_waits_ms=0), embedding=embedding).open()
    result = col.store([note("The staging database listens on port 6543 behind pgbouncer.", "m1")], author="kite")
    assert result == [{"status": "stored", "id": "m1", "chunks": 1}]
    assert col.rows.unembedded == {"m1"}
    assert col.vectors.live == 0  # no vector yet
    lexical = col.search("pgbouncer port", top_k=5, filters=Filters(), mode="lexical")
    assert [hit.memory.id for hit in lexical] == ["m1"]
    assert dense_ids(col, "which port does the staging db use") == []  # not by meaning yet, and no wait
    assert not col.wait_embedded(timeout=0.2)
    embedding.start()
    assert col.wait_embedded(timeout=30)
    assert not col.rows.unembedded and col.vectors.live == 1
    assert len(col.rows) == 1  # embedded in its row: no second row, no second set of BM25 postings
    assert dense_ids(col, "which port does the staging db use") == ["m1"]
    entry = col.entry_of("m1")
    assert len(entry.vectors) == 4 * embedder.dim and entry.memory.content.startswith("The staging")
    embedding.stop()
    col.close()


def test_a_search_waits_for_the_stores_before_it(tmp_path, embedder):
    embedding = BackgroundEmbedder().start()
    col = Collection("memories", tmp_path / "c", embedder, MemoryConfig(), embedding=embedding).open()
    col.store([note(f"fact {n}: the {n}th lighthouse keeper kept a parrot named Blue{n}") for n in range(40)]
              + [note("Our deploy key rotates every ninety days.", "key")], author="kite")
    # No explicit wait: the search itself waits until the memories stored before it have their vectors.
    assert dense_ids(col, "how often is the deployment key rotated", k=1) == ["key"]
    embedding.stop()
    col.close()


def test_memories_left_unembedded_are_embedded_when_the_collection_opens_again(tmp_path, embedder):
    embedding = BackgroundEmbedder()  # never started: the server "stops" before embedding anything
    col = Collection("memories", tmp_path / "c", embedder, MemoryConfig(), embedding=embedding).open()
    col.store([note(f"item {n} is a {['kettle', 'lamp', 'chair'][n % 3]}", f"i{n}") for n in range(30)], author="kite")
    col.close()
    again = BackgroundEmbedder().start()
    col = Collection("memories", tmp_path / "c", embedder, MemoryConfig(), embedding=again).open()
    assert col.wait_embedded(timeout=60)
    assert not col.rows.unembedded and col.vectors.live == 30
    assert "i1" in dense_ids(col, "a lamp", k=10)
    again.stop()
    col.close()


def test_lifecycle_changes_before_embedding_keep_the_memory_waiting_and_its_detection(tmp_path, embedder):
    embedding = BackgroundEmbedder()
    col = Collection("memories", tmp_path / "c", embedder, MemoryConfig(), embedding=embedding).open()
    col.store([note("The team standup is at 9:30 in the Oak room.", "old")], author="kite")
    embedding.start()
    assert col.wait_embedded(timeout=30)
    embedding.stop()
    embedding = col.embedding = BackgroundEmbedder()
    col.store([note("The team standup is now at 10:00 in the Oak room.", "new", detect_supersession=True)],
              author="kite")
    col.validate("new", by="wren", helpful=True, note="right")  # logged again before it has vectors
    assert "new" in col.rows.unembedded and col.entry_of("new").detect
    embedding.start()
    assert col.wait_embedded(timeout=30)
    memory = col.get("new")
    assert memory.supersedes == ["old"] and memory.link_history[-1].how == "detected"
    assert [f.by for f in memory.feedback] == ["wren"]
    assert col.rows.successor_of.get("old") == "new"
    embedding.stop()
    col.close()


def test_near_duplicates_are_turned_away_before_any_vector_exists(tmp_path, embedder):
    embedding = BackgroundEmbedder()  # not started: the first memory has no vector either
    col = Collection("memories", tmp_path / "c", embedder, MemoryConfig(), embedding=embedding).open()
    col.store([note("The VPN config lives in /etc/wireguard/wg0.conf", "vpn")], author="kite")
    near = col.store([note("The VPN config lives in /etc/wireguard/wg0.conf!")], author="kite")[0]
    assert near["status"] == "duplicate" and near["id"] == "vpn" and near["match"] == "near"
    other = col.store([note("The VPN config lives in /etc/wireguard/wg1.conf")], author="kite")[0]
    assert other["status"] == "stored"  # one word in ten differs and the meaning is not the same file
    by_wren = col.store([note("The VPN config lives in /etc/wireguard/wg0.conf!")], author="wren")[0]
    assert by_wren["status"] == "stored"  # another author's memory is never a duplicate of it
    col.close()


def test_concurrent_writers_share_fsyncs(tmp_path, embedder, monkeypatch):
    embedding = BackgroundEmbedder()
    col = Collection("memories", tmp_path / "c", embedder, MemoryConfig(), embedding=embedding).open()
    fsyncs = []
    real_fsync = os.fsync

    def counting_fsync(fd):  # the real fsync, counted
        fsyncs.append(fd)
        time.sleep(0.002)  # a slower disk makes writers meet, as they do on a real one under load
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    errors = []

    def writer(w: int) -> None:
        try:
            for n in range(25):
                col.store([note(f"writer {w} wrote line {n} of its log", f"w{w}-{n}")], author="kite", dedup=False)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert not errors
    assert len(col.memories) == 200
    assert len(fsyncs) < 150, f"{len(fsyncs)} fsyncs for 200 stores"  # shared, not one each
    col.close()
    col = Collection("memories", tmp_path / "c", embedder, MemoryConfig()).open()  # embeds them as it opens
    assert len(col.memories) == 200 and not col.rows.unembedded and col.vectors.live == 200
    col.close()


def test_kill_9_between_acknowledgement_and_embedding_loses_nothing(tmp_path, embedder, killed_after):
    """Batches are acknowledged faster than they are embedded; SIGKILL at random moments. After each kill every
    acknowledged memory is there, and once the collection is open again every one of them is found by meaning."""
    folder = tmp_path / "memories"
    rng = random.Random(21)
    acknowledged: list[str] = []
    pending_seen = 0
    for kill in range(6):
        lines = killed_after("embedding_writer_for_kill.py", folder, len(acknowledged) + 1000 * kill,
                             rng.uniform(0.4, 1.5))
        acknowledged += [memory_id for line in lines for memory_id in line.split()]
        embedding = BackgroundEmbedder().start()
        col = Collection("memories", folder, embedder, MemoryConfig(), embedding=embedding).open()
        pending_seen += len(col.rows.unembedded)
        missing = [memory_id for memory_id in acknowledged if memory_id not in col.memories]
        assert not missing, f"acknowledged memories lost after kill {kill}: {missing[:5]}"
        assert col.wait_embedded(timeout=120)
        assert not col.rows.unembedded
        assert col.vectors.live == sum(head.n_labels for head in col.memories.values())
        for memory_id in rng.sample(acknowledged, min(5, len(acknowledged))):
            content = col.get(memory_id).content
            assert memory_id in dense_ids(col, content, k=3), f"{memory_id} not found by meaning after kill {kill}"
        embedding.stop()
        col.close()
    assert acknowledged, "the writer acknowledged nothing"
    assert pending_seen, "no kill landed between an acknowledgement and its embedding"


def test_consolidation_takes_memories_not_embedded_yet(tmp_path, embedder):
    from persmem_memory_hnsw.lifecycle.consolidation import consolidate

    embedding = BackgroundEmbedder()  # never started: every memory is still waiting for its vector
    config = MemoryConfig(consolidate_min_age_days=0)
    col = Collection("memories", tmp_path / "c", embedder, config, embedding=embedding).open()
    col.store([note(f"The staging deploy of build {n} failed on the migration step again.") for n in range(5)],
              author="kite", dedup=False)
    assert len(col.rows.unembedded) == 5
    report = consolidate(col, config, dry_run=True, now=time.time() + 60)
    # Compared by meaning all the same (each is embedded for the comparison): the five near-identical notes are
    # one cluster.
    assert report.candidates == 5 and len(report.clusters) == 1 and report.created == 1
    col.close()


def test_the_count_of_memories_waiting_can_be_one_authors_own(tmp_path, embedder):
    embedding = BackgroundEmbedder()  # not started
    col = Collection("memories", tmp_path / "c", embedder, MemoryConfig(), embedding=embedding).open()
    col.store([note(f"kite's note {n} about the harbour crane") for n in range(3)], author="kite", dedup=False)
    col.store([note("wren's note about the lighthouse lamp")], author="wren", dedup=False)
    assert (col.unembedded_count(), col.unembedded_count("kite"), col.unembedded_count("wren")) == (4, 3, 1)
    assert col.unembedded_count("owl") == 0
    col.close()


def test_a_store_queued_under_another_chunking_is_embedded_with_new_labels(tmp_path, embedder, monkeypatch):
    """A long memory logged (labels reserved) by a version that cut texts into 256-token windows and embedded
    after an upgrade to 128-token passages gets as many labels as it now has vectors, instead of being skipped
    for good (never found by meaning)."""
    import persmem_memory_hnsw.embedding.embedder as chunking

    long_text = " ".join(f"Paragraph {i} of the runbook: rotate the keys of cluster {i} and check the logs."
                         for i in range(40)) + " The last step: page the on-call engineer named Ferdinand."
    monkeypatch.setattr(chunking, "PASSAGE", 256)
    monkeypatch.setattr(chunking, "STRIDE", 192)
    embedding = BackgroundEmbedder()  # not started: the store is only logged, its labels reserved
    col = Collection("memories", tmp_path / "c", embedder, MemoryConfig(search_waits_ms=0), embedding=embedding).open()
    reserved = col.store([note(long_text, "runbook")], author="kite")[0]["chunks"]
    monkeypatch.setattr(chunking, "PASSAGE", 128)
    monkeypatch.setattr(chunking, "STRIDE", 96)
    assert len(embedder.embed_chunks([long_text])[0]) > reserved
    embedding.start()
    assert col.wait_embedded(timeout=30)
    assert not col.rows.unembedded
    head = col.rows.heads["runbook"]
    assert head.n_labels == len(embedder.embed_chunks([long_text])[0]) and col.vectors.live == head.n_labels
    assert dense_ids(col, "who gets paged at the end of the runbook") == ["runbook"]
    col.close()
    reopened = Collection("memories", tmp_path / "c", embedder, MemoryConfig()).open()  # replays the same way
    assert not reopened.rows.unembedded and reopened.rows.heads["runbook"].n_labels == head.n_labels
    reopened.close()
    embedding.stop()


def test_a_filtered_search_before_the_embedding_finds_by_keyword_and_does_not_fail(tmp_path, embedder):
    embedding = BackgroundEmbedder()  # not started
    col = Collection("memories", tmp_path / "c", embedder, MemoryConfig(search_waits_ms=0), embedding=embedding).open()
    col.store([note("The staging database listens on port 6543 behind pgbouncer.", "m1", project="ops")],
              author="kite")
    only_ops = Filters(project="ops")
    assert col.search("which port does the staging db use", top_k=5, filters=only_ops, mode="dense") == []
    hybrid = col.search("pgbouncer port", top_k=5, filters=only_ops)
    assert [hit.memory.id for hit in hybrid] == ["m1"]
    col.close()

"""Consolidation at scale (issue 17): in a large group, leaders find their neighbours through a graph of the
group instead of a pass over every candidate. The graph only proposes: it must give the clusters the exact pass
gives, the same on every run, and a run after it must find nothing left to do. A real collection and the real
embedder; the path is forced with consolidate(graph=...) (the automatic choice takes the graph only above
thousands of candidates)."""

from pathlib import Path

import pytest

from consolidation_testdata import synthetic_memories


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    from persmem_memory_hnsw.collection import Collection, NewMemory
    from persmem_memory_hnsw.config import MemoryConfig
    from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files

    embedder = OnnxEmbedder(default_model_files()).load()
    folder = Path(tmp_path_factory.mktemp("scale")) / "memories"
    col = Collection("memories", folder, embedder, MemoryConfig(consolidate_min_age_days=0)).open()
    texts = synthetic_memories(400, seed=23)
    # Two authors and two projects: four groups, each planned on its own.
    col.store([NewMemory(content=text, project=f"p{i % 2}", type="note", tags=[f"t{i % 3}"], memory_id=f"s{i:03d}",
                         author="kite" if i % 4 < 2 else "wren", created=1.7e9 + i)
               for i, text in enumerate(texts)], author="kite", dedup=False)
    yield col
    col.close()


def clusters(report) -> dict[str, tuple[str, ...]]:
    return {c.id: tuple(c.members) for c in report.clusters if c.action != "unchanged"}


def test_the_graph_gives_the_exact_clusters_on_every_run_and_a_second_run_adds_nothing(collection):
    from persmem_memory_hnsw.lifecycle.consolidation import consolidate

    config = collection.config
    exact = consolidate(collection, config, dry_run=True, graph=False)
    graph = consolidate(collection, config, dry_run=True, graph=True)
    assert len(exact.clusters) >= 20, "the data has clusters to find"
    assert clusters(graph) == clusters(exact), "the same clusters, the same members in the same order"
    assert clusters(consolidate(collection, config, dry_run=True, graph=True)) == clusters(graph), "deterministic"
    assert {c.author for c in graph.clusters} == {"kite", "wren"}
    assert all(len(set(collection.memories[m].project for m in c.members)) == 1 for c in graph.clusters)

    done = consolidate(collection, config, dry_run=False, graph=True)
    assert done.created == len(clusters(exact)) and done.grown == 0
    log_size = collection.log.size
    for path in (True, False):  # whichever way the next run looks, nothing is left to gather
        again = consolidate(collection, config, dry_run=False, graph=path)
        assert (again.created, again.grown) == (0, 0), [c.to_dict() for c in again.clusters if c.action != "unchanged"]
        assert sum(c.action == "unchanged" for c in again.clusters) == done.created
    assert collection.log.size == log_size, "a run with nothing to do writes nothing"
    assert all(f"s{i:03d}" in collection.memories for i in range(400)), "nothing deleted"

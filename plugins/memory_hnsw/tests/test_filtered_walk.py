"""A filtered search the hnswlib graph answers (more chunks than `exact_search_below`): the unfiltered walk's
nearest, filtered after, when the filter keeps a fair share of the chunks; the walk that filters as it goes (a
Python callback per visited candidate) when it keeps few. Both find what an exact search over the filtered
chunks finds, on a collection small enough for the graph to be exact."""

from __future__ import annotations

import pytest

from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files
from persmem_memory_hnsw.search import ranking
from persmem_memory_hnsw.store.query import Filters

TOPICS = ["the backup server", "a green parrot", "tuesday's deploy", "the cat's dinner", "the ledger's totals",
          "a vacuum cleaner", "the auth cache", "kite surfing", "the wren's nest", "paint for the fence"]


@pytest.fixture(scope="module")
def col(tmp_path_factory):
    embedder = OnnxEmbedder(default_model_files()).load()
    c = Collection("memories", tmp_path_factory.mktemp("walk") / "memories", embedder, MemoryConfig()).open()
    memories = [NewMemory(content=f"Note {i} about {TOPICS[i % 10]}, seen {i % 7} times", type="note", tags=[],
                          project="rare" if i % 100 == 0 else f"p{i % 3}") for i in range(600)]
    c.store(memories, author="kite", dedup=False)
    c.wait_embedded(60)
    yield c
    c.close()


@pytest.mark.parametrize("project, pool, cap, unfiltered", [
    ("p1", 16, ranking.MAX_OVERFETCHED, True),  # a third of the chunks: the unfiltered walk's 96 nearest, filtered
    ("rare", 6, ranking.MAX_OVERFETCHED, True),  # 6 of 600: all of them, filtered
    ("p1", 16, 0, False),  # past the cap: the walk that filters as it goes
])
def test_a_filtered_walk_finds_what_an_exact_search_finds(col, monkeypatch, project, pool, cap, unfiltered):
    walks = []
    search = col.vectors.search
    monkeypatch.setattr(col.vectors, "search", lambda q, k, allowed=None: (walks.append(allowed is None),
                                                                         search(q, k, allowed))[1])
    monkeypatch.setattr(ranking, "MAX_OVERFETCHED", cap)
    rows = col.rows
    mask = rows.mask(Filters(project=project), len(rows))
    walked_config = MemoryConfig(exact_search_below=0)
    for query in ("where is the backup server", "what does the parrot eat", "fence paint colour"):
        qvec = col.embedder.embed_query(query)
        exact = ranking.dense_candidates(rows, col.vectors, MemoryConfig(), qvec, mask, pool)
        walks.clear()
        walked = ranking.dense_candidates(rows, col.vectors, walked_config, qvec, mask, pool)
        assert walks == [unfiltered]
        assert len(walked) == len(exact) and all(mask[row] for row in walked)
        # the same rows, but for near-ties at the edge (the exact side scores the int8 copy, the graph float32)
        edge = min(walked.values())
        assert all(sim <= edge + 0.02 for row, sim in exact.items() if row not in walked), (walked, exact)
        assert max(walked.values()) == pytest.approx(max(exact.values()), abs=0.02)

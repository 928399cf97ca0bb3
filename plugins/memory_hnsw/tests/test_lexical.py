"""BM25 postings: merging the delta into the compact block never changes a score."""

import random

import numpy as np

from persmem_memory_hnsw.lexical import BM25Index

def dense(index: BM25Index, query: str, n_rows: int) -> np.ndarray | None:
    """index.scores as one score per row (0 where a row holds no query term)."""
    found = index.scores(query, n_rows)
    if found is None:
        return None
    out = np.zeros(n_rows, dtype=np.float32)
    out[found[0]] = found[1]
    return out


WORDS = "server backup green tuesday deploy cat keyboard ledger vacuum cache auth kite wren paint".split()


def test_scores_do_not_depend_on_when_postings_were_merged():
    rng = random.Random(7)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))) + f" n{i}" for i in range(400)]
    merged_often, never = BM25Index(), BM25Index()
    merged_often.MERGE_AT = 50
    never.MERGE_AT = 10**9
    for row, text in enumerate(docs):
        context = docs[row - 1] if row % 3 == 0 and row else ""  # some documents carry their neighbour's words
        merged_often.add(row, text, context)
        never.add(row, text, context)
        if row % 97 == 0:
            merged_often.remove(row)
            never.remove(row)
    assert merged_often._delta_size < 50 and never._delta_size > 1000  # both states are exercised
    for query in ("green server", "n17 cat", "ledger vacuum tuesday", "nothing-matches", "paint paint kite"):
        a, b = dense(merged_often, query, len(docs)), dense(never, query, len(docs))
        assert (a is None and b is None) or np.allclose(a, b), query
    merged_often.merge()
    assert np.allclose(dense(merged_often, "green server", len(docs)), dense(never, "green server", len(docs)))


def test_context_words_count_but_less_than_own_words():
    index = BM25Index()
    index.add(0, "we painted the harbour", "")
    index.add(1, "a sunrise over the lake", "we painted the harbour")  # same length, the words only as context
    index.add(2, "the grey kitten sleeps", "")
    scores = dense(index, "harbour", 3)
    assert scores[0] > scores[1] > 0 and scores[2] == 0


def test_scores_name_only_live_rows_below_n_rows_each_once():
    index = BM25Index()
    for row, text in enumerate(["red kite", "red wren", "kite kite", "a grey cat", "red kite wren"]):
        index.add(row, text)
    index.remove(1)
    rows, scores = index.scores("red kite", 4)
    assert sorted(rows.tolist()) == [0, 2]  # 1 removed, 3 has neither word, 4 is past n_rows
    assert len(set(rows.tolist())) == len(rows) and (scores > 0).all()
    both = dict(zip(rows.tolist(), scores.tolist()))
    assert both[0] > both[2] * 0.5  # "red" and "kite" add up for row 0

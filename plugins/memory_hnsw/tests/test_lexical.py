"""BM25 postings: merging the delta into the compact block never changes a score."""

import random

import numpy as np

from persmem_memory_hnsw.lexical import BM25Index

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
        a, b = merged_often.scores(query, len(docs)), never.scores(query, len(docs))
        assert (a is None and b is None) or np.allclose(a, b), query
    merged_often.merge()
    assert np.allclose(merged_often.scores("green server", len(docs)), never.scores("green server", len(docs)))


def test_context_words_count_but_less_than_own_words():
    index = BM25Index()
    index.add(0, "we painted the harbour", "")
    index.add(1, "a sunrise over the lake", "we painted the harbour")  # same length, the words only as context
    index.add(2, "the grey kitten sleeps", "")
    scores = index.scores("harbour", 3)
    assert scores[0] > scores[1] > 0 and scores[2] == 0

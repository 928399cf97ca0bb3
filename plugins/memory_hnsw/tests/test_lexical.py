"""BM25 postings: merging the delta into the compact block never changes a score."""

import random

import numpy as np
import pytest

from persmem_memory_hnsw.store.lexical import BM25Index

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
    merged_often.MERGE_AT, merged_often.MERGE_SHARE = 50, 10**9  # every 50 postings, whatever the block's size
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


def test_the_delta_is_merged_when_it_reaches_a_quarter_of_the_block_so_merges_get_rarer_as_it_grows():
    """A merge rewrites the whole block (~2 s at 1M memories): waiting for a delta a quarter of the block's size
    keeps the merging cost per posting added the same at any size."""
    index = BM25Index()
    index.MERGE_AT = 100
    merges = []
    merge = index.merge
    index.merge = lambda: (merges.append(len(index._rows)), merge())
    for row in range(6000):
        index.add(row, f"alpha beta n{row} m{row % 7}")
    assert len(merges) <= 25  # 24,000 postings: every 100 would be 240 merges; a quarter more each time, ~25
    assert all(after >= before * 1.2 for before, after in zip(merges[1:], merges[2:])), merges
    assert index._delta_size < max(100, len(index._rows) // 4)
    assert sorted(index.scores("n5999", 6000)[0].tolist()) == [5999]  # found in the delta, not merged yet


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


def test_a_scope_scores_as_if_the_other_scopes_documents_did_not_exist():
    """A search that may see one scope (an agent's own rows of a private collection) gets the scores an index of
    that scope's documents alone gives: another scope's words, however many, never move them (issue 32)."""
    rng = random.Random(11)
    docs = [(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))), rng.choice((0, 1, 2))) for _ in range(300)]
    docs += [("albatross " * rng.randint(1, 5) + "vault", 2) for _ in range(60)]  # only scope 2 says albatross
    everything = BM25Index()
    alone = {scope: BM25Index() for scope in (0, 1, 2)}
    own_row = {scope: [] for scope in alone}  # row in `alone[scope]` -> row in `everything`
    everything.MERGE_AT = 40
    for row, (text, scope) in enumerate(docs):
        everything.add(row, text, scope=scope)
        alone[scope].add(len(own_row[scope]), text)
        own_row[scope].append(row)
        if row % 23 == 0:  # deletions count in the statistics of their own scope only
            everything.remove(row)
            alone[scope].remove(len(own_row[scope]) - 1)
    for scope in (0, 1):
        for query in ("albatross vault", "green server albatross", "ledger cache", "vault"):
            got = everything.scores(query, len(docs), scope)
            want = alone[scope].scores(query, len(own_row[scope]))
            if want is None:
                assert got is None or len(got[0]) == 0, (scope, query)
                continue
            mapped = dict(zip(np.asarray(own_row[scope])[want[0]].tolist(), want[1].tolist(), strict=True))
            assert dict(zip(got[0].tolist(), got[1].tolist(), strict=True)) == pytest.approx(mapped, rel=1e-6)
    # and over every scope (a shared collection), the statistics of every live document, as before
    assert everything.scores("vault", len(docs)) is not None
    assert everything.n_alive == sum(everything.scope_alive.values())

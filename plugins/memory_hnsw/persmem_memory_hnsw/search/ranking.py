"""Ranking a collection's rows for a query: dense (the hnswlib graph, or exact over the filtered chunks when
the filter is selective) + BM25, min-max score fusion, then what the query and the rows say (questions rank
lower, rows from a time the query names higher: `weigh`), then the lifecycle's factors (lifecycle.adjust:
supersession, consolidation, feedback, use, tier, staleness, recency), which also drop the rows the search's
options hide before the top_k cut; then, among the best results, an older one yields to a later restatement of
it (lifecycle.restated). The caller holds the collection's read lock and turns the ranked rows into
memories."""

from __future__ import annotations

import dataclasses
import heapq
import time
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from ..config import MemoryConfig
from .weighing import LifecycleView, adjust, restated
from ..store.query import Filters
from .query_dates import around, named_ranges
from ..store.records import Memory
from ..store.rows import Rows
from ..store.vectors import VectorIndex


# The best fused candidates the lifecycle's factors weigh (they move a score by a bounded factor, so a result
# further down never reaches the top_k): as many as the 60 + 60 candidates of before search_candidates was 200.
LIFECYCLE_POOL = 120
# A filtered dense search that the graph answers (more chunks than exact_search_below) walks it unfiltered for
# OVERFETCH times the chunks the filter's share needs, up to MAX_OVERFETCHED, and filters them after (_filtered_walk).
OVERFETCH = 2
MAX_OVERFETCHED = 4096


@dataclasses.dataclass
class Hit:
    """One search result: the memory, its fused score, and its best dense similarity and BM25 score (None where
    that side did not find it)."""

    memory: Memory
    score: float
    dense: float | None
    lexical: float | None
    restated_by: str | None = None  # a later memory of the same subject this result ranks below (weighing.restated)


class Ranked(NamedTuple):
    row: int
    score: float
    dense: float | None  # the best chunk's cosine similarity, if the dense side found the row
    lexical: float | None  # its BM25 score, if the lexical side found it
    restated_by: int | None = None  # the later row it ranks below (lifecycle.restated), if any


def rank(rows: Rows, vectors: VectorIndex, config: MemoryConfig, query: str, qvec: np.ndarray | None, *,
         top_k: int, filters: Filters, mode: str, candidates: int,
         lifecycle: LifecycleView | None = None, visible_author: str | None = None) -> list[Ranked]:
    """The `top_k` best live rows for `query` (`qvec`: its embedding, None in lexical mode), best first,
    weighed by `lifecycle` (None: by relevance alone). `visible_author`: the caller may see only this author's
    rows (a private collection): only those are ranked, and BM25 scores them with their own statistics, never
    with words of rows the caller may not see. None: the caller may see every row."""
    n_rows = len(rows)
    if n_rows == 0:
        return []
    scope = None
    if visible_author is not None:
        scope = rows.authors.code.get(visible_author)
        if scope is None:  # nothing of theirs here
            return []
        filters = filters if filters.author == visible_author else dataclasses.replace(filters, author=visible_author)
    mask = rows.mask(filters, n_rows) if filters.active() else None
    pool = max(candidates, top_k * 4)
    dense = _dense(rows, vectors, config, qvec, mask, pool) if qvec is not None else {}
    lexical = _lexical(rows, query, mask, n_rows, pool, scope) if mode in ("hybrid", "lexical") else {}
    scores = fuse(dense, lexical, config.dense_weight if mode == "hybrid" else (1.0 if mode == "dense" else 0.0))
    now = lifecycle.now if lifecycle is not None else time.time()
    named = named_ranges(query, now) if config.date_weight else []
    scores, then = weigh(scores, rows, config, around(named))
    yields_to: dict[int, int] = {}
    if lifecycle is not None and scores:
        weighed = max(LIFECYCLE_POOL, 8 * top_k)
        if len(scores) > weighed:  # the many candidates set the fusion's scale only
            scores = dict(heapq.nlargest(weighed, scores.items(), key=itemgetter(1)))
        scores = adjust(scores, rows, lifecycle, allowed=mask)
        # A query about a past time ("in May 2023", "yesterday") that memories match asks what was so then: the
        # later statement does not win. "This week", or a time no memory is from ("in 2000 rows"), changes nothing.
        if not (then and any(end <= now for _, end in named)):
            scores, yields_to = restated(scores, rows, lifecycle, top_k)
    best = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)[:top_k]
    return [Ranked(row, float(score), dense.get(row), lexical.get(row), yields_to.get(row)) for row, score in best
            if rows.at_row[row] is not None]


def dense_candidates(rows: Rows, vectors: VectorIndex, config: MemoryConfig, qvec: np.ndarray, mask: np.ndarray,
                     pool: int) -> dict[int, float]:
    """Row -> best chunk similarity to `qvec` for the `pool` most similar rows that `mask` allows (the dense
    side of a search; supersession.find_superseded looks for restated memories with it)."""
    return _dense(rows, vectors, config, qvec, mask, pool)


def nearest_rows(rows: Rows, vectors: VectorIndex, config: MemoryConfig, mask: np.ndarray, vecs: np.ndarray,
                 pool: int) -> dict[int, float]:
    """Row -> best cosine between any chunk of `vecs` (a memory's vectors) and any chunk of the row, for the
    `pool` nearest rows `mask` allows to each chunk (what supersession and restatement compare a memory with)."""
    best: dict[int, float] = {}
    for qvec in vecs:
        for row, sim in dense_candidates(rows, vectors, config, qvec, mask, pool).items():
            if sim > best.get(row, -2.0):
                best[row] = sim
    return best


def _dense(rows: Rows, vectors: VectorIndex, config: MemoryConfig, qvec: np.ndarray, mask: np.ndarray | None,
           pool: int) -> dict[int, float]:
    """Best chunk similarity per row for the `pool` best rows: exact over the filtered rows when they hold
    few chunks, else the hnswlib graph (_filtered_walk)."""
    if mask is not None:
        picked = np.flatnonzero(mask)
        counts = rows.label_count[picked]
        total = int(counts.sum())
        if total <= config.exact_search_below:
            if rows.unembedded:  # their labels are reserved but hold no vector yet (found by keyword meanwhile)
                waiting = [rows.row_of[i] for i in rows.unembedded if i in rows.row_of]
                keep = ~np.isin(picked, np.asarray(waiting, dtype=picked.dtype))
                picked, counts = picked[keep], counts[keep]
                total = int(counts.sum())
            return _exact(rows, vectors, qvec, picked, counts, total, pool)
        labels, sims = _filtered_walk(rows, vectors, qvec, mask, pool, total)
    else:
        labels, sims = vectors.search(qvec, pool)
    # `pool` chunks, best first; a row with several among them keeps its best (the first)
    labels = labels.astype(np.int64)
    inside = labels < len(rows.label_row)
    labels, sims = labels[inside], sims[inside]
    found = rows.label_row[labels]
    order = np.argsort(-sims, kind="stable")
    found, sims = found[order], sims[order]
    keep = found >= 0
    found, sims = found[keep], sims[keep]
    _, first = np.unique(found, return_index=True)
    first.sort()
    return dict(zip(found[first].tolist(), sims[first].tolist(), strict=True))


def _filtered_walk(rows: Rows, vectors: VectorIndex, qvec: np.ndarray, mask: np.ndarray, pool: int,
                   total: int) -> tuple[np.ndarray, np.ndarray]:
    """The `pool` nearest chunks of the rows `mask` allows (`total` chunks), from the graph. When the filter keeps
    a fair share of the chunks: the unfiltered walk's nearest, OVERFETCH times what the share needs, filtered
    after (numpy). Else, or when those hold too few: a walk that applies the filter as it goes, which calls back
    into Python for every candidate it visits (~5 ms at 1M memories, paid for each result whose restatements a
    search works out)."""
    want = -(-pool * vectors.live // max(total, 1)) * OVERFETCH
    if want <= MAX_OVERFETCHED:
        labels, sims = vectors.search(qvec, want)
        at = labels.astype(np.int64)
        row = np.full(len(at), -1, dtype=np.int64)
        inside = at < len(rows.label_row)
        row[inside] = rows.label_row[at[inside]]
        keep = row >= 0
        keep[keep] = mask[row[keep]]
        if int(keep.sum()) >= pool or want >= vectors.live:
            return labels[keep][:pool], sims[keep][:pool]
    label_row = rows.label_row[: rows.next_label]
    ok = np.zeros(len(label_row), dtype=np.uint8)
    live = label_row >= 0
    ok[live] = mask[label_row[live]]
    ok = ok.tobytes()
    return vectors.search(qvec, pool, allowed=lambda label: ok[label] == 1)


def _exact(rows: Rows, vectors: VectorIndex, qvec: np.ndarray, picked: np.ndarray, counts: np.ndarray, total: int,
           pool: int) -> dict[int, float]:
    """Exact similarities over the chunks of the `picked` rows (`counts` chunks each, `total` in all)."""
    if total == 0:
        return {}
    if total == len(picked) and bool((counts == 1).all()):  # one chunk each (the usual case)
        sims = vectors.similarities(rows.first_label[picked], qvec)
    else:  # a row's labels are consecutive: expand them, then take each row's best chunk
        starts = np.cumsum(counts) - counts
        labels = np.repeat(rows.first_label[picked] - starts, counts) + np.arange(total)
        keep = counts > 0
        picked, starts = picked[keep], starts[keep]
        sims = np.maximum.reduceat(vectors.similarities(labels, qvec), starts)
    n = min(pool, len(picked))
    top = np.argpartition(-sims, n - 1)[:n]
    return dict(zip(picked[top].tolist(), sims[top].tolist(), strict=True))


def _lexical(rows: Rows, query: str, mask: np.ndarray | None, n_rows: int, pool: int,
             scope: int | None = None) -> dict[int, float]:
    found = rows.lexical.scores(query, n_rows, scope)
    if found is None:
        return {}
    picked, scores = found
    if mask is not None:
        keep = mask[picked].astype(bool)
        picked, scores = picked[keep], scores[keep]
    n = min(pool, len(picked))
    if n == 0:
        return {}
    top = np.argpartition(-scores, n - 1)[:n]
    return dict(zip(picked[top].tolist(), scores[top].tolist(), strict=True))


def weigh(scores: dict[int, float], rows: Rows, config: MemoryConfig,
          ranges: list[tuple[float, float]]) -> tuple[dict[int, float], bool]:
    """The fused `scores` with what the query and the rows say: a row whose text is a question times
    `question_weight` (the chunk after it, its likely answer, carries its words: store/contexts.py); a row created
    within `ranges` (around the times the query names: search/query_dates.py) plus `date_weight`. Also: whether any
    row was within them."""
    if not scores:
        return scores, False
    picked = np.fromiter(scores, dtype=np.int64, count=len(scores))
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    if config.question_weight != 1.0:
        values[rows.question[picked]] *= config.question_weight
    inside = np.zeros(len(picked), dtype=bool)
    if ranges:
        created = rows.created[picked]
        for start, end in ranges:
            inside |= (created >= start) & (created < end)
        values[inside] += config.date_weight
        values /= 1.0 + config.date_weight  # scores stay within 0-1
    return dict(zip(picked.tolist(), values.tolist(), strict=True)), bool(inside.any())


def fuse(dense: dict[int, float], lexical: dict[int, float], dense_weight: float) -> dict[int, float]:
    """Min-max score fusion: each candidate list scaled to [0, 1] (best 1, worst 0), then a weighted sum. A
    dense side of one candidate (or all alike) has no scale: its cosine stands (clipped to 0-1), so a lone
    unrelated memory is not made the best match (as when the others wait for the embedder on a busy box)."""
    out: dict[int, float] = {}
    for scores, weight, is_dense in ((dense, dense_weight, True), (lexical, 1.0 - dense_weight, False)):
        if not scores or weight <= 0:
            continue
        top, low = max(scores.values()), min(scores.values())
        span = top - low
        for row, score in scores.items():
            if span > 1e-9:
                scaled = (score - low) / span
            else:
                scaled = min(1.0, max(0.0, score)) if is_dense else 1.0
            out[row] = out.get(row, 0.0) + weight * scaled
    return out
